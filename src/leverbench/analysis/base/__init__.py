"""What every part of the analysis reads: the records that count (``dataset``), the knobs an arm runs under (``knobs``),
the guard's one rule of citability (``guard``; its reason codes and the closed list of warnings are the summary's, in
:mod:`leverbench.schema`), the server's own metrics (``metrics``), small statistics (``stats``), the bounds of the
numbers analysis takes (``bounds``) and a trace's operating point against the levers under load (``operating_point``:
``analyze`` and ``whatif`` both judge it). It imports no other part of :mod:`leverbench.analysis`: the guard sits
here, not with the comparisons, because the rate model's phases and the sequential verdicts apply it too."""
