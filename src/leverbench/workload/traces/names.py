"""The traffic formats' names, in the order the docs and ``--format`` list them.

Kept apart from the readers (no polars here), so the experiment file's schema
and the command line can name the formats without loading them; the registry
checks that every name has its module and every module its name.
"""

FORMATS: tuple[str, ...] = ("mooncake", "azure", "tracelab-replay", "tracelab-round", "vllm-bench", "aiperf",
                            "leverbench", "generic")
