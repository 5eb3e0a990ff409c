"""The hardware the arms ran on and the engines the tool started, from the ledger's header and its
``engine_start``, ``engine_stop`` and ``gpu`` records: :mod:`.engines` (together or one at a time, each start
timed, each stop checked), :mod:`.telemetry` (what the GPUs did in prefill and in decode, the energy of a turn).
May import ``base``."""
