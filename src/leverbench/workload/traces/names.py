"""The traffic formats' names (:data:`leverbench.trace_formats.TRACE_FORMATS`, which ``[[load]]
trace_format`` takes), apart from the readers (no polars here), so the schema and the command line can
name the formats without loading them; the registry checks that every name has its module and every
module its name.
"""

from ...trace_formats import TRACE_FORMATS as FORMATS

__all__ = ["FORMATS"]
