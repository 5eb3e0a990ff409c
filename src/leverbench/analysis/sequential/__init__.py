"""Sequential verdicts (``confidence``: the confidence sequence, the fixed interval, the fixed design) and the
simulation study behind them (``study``).  May import :mod:`..base` only."""
