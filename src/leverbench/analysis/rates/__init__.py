"""The rate model: prefill and decode rates from the probes (``probes``, ``rate_fit``), the phase regression
(``regression``), its formulas (``rate_model``), the client and server accounts of the phases (``server``) and
where the time goes (``phases``).  May import :mod:`..base` only."""
