"""Load metrics per (arm, stage) from the ledger's ``load`` records (``stages``).  May import :mod:`..base`
only."""
