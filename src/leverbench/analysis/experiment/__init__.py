"""The experiment's comparisons: the cells (``cells``), drift (``drift``), equal work (``equal_work``), whether a
lever engaged (``engaged``), the verdicts (``verdicts``), the headline per lever (``levers``), cost
(``cost``), reasoning accounting (``reasoning``), the levers under load: each pair at every load level
(``under_load``), where it flips (``crossover``), capacity at an SLO and its price (``capacity``), and a
recorded turns' replay's fidelity (``fidelity``).  May import :mod:`..base`, :mod:`..sequential`,
:mod:`..rates` and :mod:`..load`."""
