"""The traffic formats' names, in the order the docs and ``--format`` list them.

Defined with the experiment file's schema (:data:`leverbench.config.stages.TRACE_FORMATS`, which
``trace_format`` takes), apart from the readers (no polars there), so the schema and the command line
can name the formats without loading them; the registry checks that every name has its module and
every module its name.
"""

from ...config.stages import TRACE_FORMATS as FORMATS

__all__ = ["FORMATS"]
