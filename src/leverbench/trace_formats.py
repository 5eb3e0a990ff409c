"""The traffic formats' names, in the order the docs and ``--format`` list them: one definition, a leaf
module (it imports nothing), so that the experiment file's schema (``[[load]] trace_format``), the trace
readers' registry and the command line name the formats without loading one another (pydantic, polars)."""

TRACE_FORMATS: tuple[str, ...] = ("mooncake", "azure", "tracelab-replay", "tracelab-round", "vllm-bench", "aiperf",
                                  "leverbench", "generic")
