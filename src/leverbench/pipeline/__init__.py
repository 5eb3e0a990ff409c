"""The library functions the commands are thin over: each reads a command's inputs (a run's ledger, a trace, a
recording, a summary.json), runs the analysis and hands the renderers of :mod:`leverbench.report` what they show,
or writes it into the run directory.

- :mod:`.run_files`: a run directory's ``summary.json``, ``report.md`` and ``report.html`` (``write_reports``),
  and the summary of a run directory (``summarize_dir``);
- :mod:`.summary_file`: a ``summary.json`` read back and checked;
- :mod:`.traffic_files`: ``leverbench analyze`` of a trace or a recording;
- :mod:`.whatif_files`: ``leverbench whatif`` and its cross-check against a run.

It sits between ``report`` (which only renders: it imports nothing here) and ``cli``.
"""
