"""Analysis: pure functions over ledger records (and traces), by concern.

Data flows one way: the ledger's records → these functions → the summary the reports format.  The
sub-packages, and what each may import from the others (``tests/test_architecture.py`` holds these rules):

- :mod:`.base` — what every part reads: the records that count (``dataset``), the knobs, the guard's rule and
  (its reason codes and the warnings' kinds are the summary's vocabulary, in :mod:`leverbench.schema`), the
  server's metrics, small statistics, the analysis' bounds.
  Imports no other part of ``analysis``.
- :mod:`.sequential` — the statistics of a verdict decided in as few repeats as the data allow, and the
  simulation study behind it.  May import ``base``.
- :mod:`.rates` — the rate model: the phase regression, the probes, the rate fit, where the time goes.  May
  import ``base``.
- :mod:`.load` — load metrics per (arm, stage).  May import ``base``.
- :mod:`.experiment` — the experiment's comparisons: cells, drift, equal work, engagement, verdicts, the
  levers' headline, cost, reasoning.  May import ``base``, ``sequential``, ``rates``, ``load``.
- :mod:`.traffic` — recorded traffic: where its time goes and what a lever would save.  May import ``base``,
  ``rates``.
- :mod:`.whatif` — a trace served on each arm's measured rates, and its cross-check.  May import ``base``,
  ``rates``, ``load``.
- :mod:`.hardware` — the engines the tool started (together or one at a time, each start and stop) and the
  GPUs: their facts, what they did in prefill and decode, the energy of a turn.  May import ``base``.
- :mod:`.sections` — the summary's sections, declared: each names what it needs and builds its typed row and
  its warnings.  May import ``base``, ``sequential``, ``rates``, ``load``, ``experiment``, ``hardware``.
- :mod:`.compare` — runs compared with a baseline run (``leverbench compare``): cases matched by what they sent,
  arms by knobs, what changed, the machine's speed between the runs, ratios for unpaired repeats.  May import
  ``base``, ``experiment``.
- :mod:`.summary` (a module) — runs the sections in order into the summary the reports show; may import every
  part.
"""
