"""``leverbench tune``: the configuration to run, found on the user's own traffic, every step a controlled comparison
(issue 40).

- :mod:`.space` — the search space: knobs and their values, the baseline, the exclusions; a configuration, its
  one-knob neighbours, the grid.
- :mod:`.search` — the search, pure: one knob changed at a time from the incumbent, each candidate raced against it
  (a :class:`.space.Racer`), adopted only when decided better; sweeps until no single change pays, then the
  winner checked against its neighbours and the baseline.
- :mod:`.races` — the racer that runs: each race a two-arm run of the experiment (the runner, the ledger, the
  guard, the sequential verdicts) in a directory of its own.

It imports config, the runner, the pipeline and the analysis; nothing imports it but the command.
"""
