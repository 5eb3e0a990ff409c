"""The experiment's comparisons: the cells (``cells``), drift (``drift``), equal work (``equal_work``), whether a
lever engaged (``engaged``), the verdicts (``verdicts``), the headline per lever (``levers``), cost
(``cost``) and reasoning accounting (``reasoning``).  May import :mod:`..base`, :mod:`..sequential`,
:mod:`..rates` and :mod:`..load`."""
