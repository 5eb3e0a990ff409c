"""Recorded traffic (``analyze``): its token sums (``sums``), the rates it is costed at (``rates``), the fit of
its phases (``fit``), its operating point (``operating``) and the recommendation's words (``words``).  May import
:mod:`..base` and :mod:`..rates`."""
