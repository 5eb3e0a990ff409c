"""Load metrics per (arm, stage) from the ledger's ``load`` records (``stages``), and a level's calls as the
comparison under load resamples them, with whether the client kept to its schedule (``levels``).  May import
:mod:`..base` only."""
