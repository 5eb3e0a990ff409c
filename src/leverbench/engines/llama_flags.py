"""llama-server's command-line flags mapped onto the prebuilt engine's parameters.

The prebuilt engine (the PyPI wheel ``xllamacpp``) holds llama.cpp's own HTTP server but no command-line
parser: its ``Server`` takes a ``CommonParams`` object.  This module is the map from the flags an arm writes,
as ``llama-server --help`` spells them (build b11434 and later), to the attributes of that object.  Parsing is
pure (no import of ``xllamacpp``): :func:`parse` turns a flag list into ``(attribute path, value)`` settings,
so an experiment file is checked before any engine starts; :func:`apply` sets them on a ``CommonParams``.

A flag the map does not hold is an error that names it and the way out: an arm can run any ``llama-server``
binary the user has (``engine = { kind = "embedded", binary = "PATH" }``), which reads every flag itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BINARY_HINT = ('name a llama-server binary that reads every flag itself: engine = { kind = "embedded", '
               'binary = "PATH" } (scripts/install.sh --compile-llama builds one, which binary = "llama-server" '
               'finds)')


class FlagError(ValueError):
    """A flag list the prebuilt engine cannot take; the message names the flag and what to do."""


# A value of kind "enum:NAME" is looked up in xllamacpp.NAME by PREFIX + the value upper-cased with '-' → '_'.
_ENUM_PREFIX = {"ggml_type": "GGML_TYPE_", "common_speculative_type": "COMMON_SPECULATIVE_TYPE_",
                "llama_flash_attn_type": "LLAMA_FLASH_ATTN_TYPE_",
                "common_reasoning_format": "COMMON_REASONING_FORMAT_"}


@dataclass(frozen=True)
class Flag:
    """One llama-server flag (with its aliases) and the ``CommonParams`` attributes it sets.

    kind: ``int``, ``float``, ``str``, ``strlist`` (comma-separated), ``on`` / ``off`` (a switch that sets
    True / False, no value), ``enum:NAME`` (one value of the enum), ``enums:NAME`` (a comma-separated list
    of them), ``strset``
    (a comma-separated set of strings), ``gpu_layers`` (a number, ``auto`` or ``all``), ``flash_attn``
    (llama.cpp's words: on / enabled / true / 1, off / disabled / false / 0, auto / -1; a value is required),
    ``seed`` (an unsigned 32-bit seed; -1, llama-server's "random", wraps as its ``stoul`` does).  Values are
    read as llama-server reads them: an enum's words exactly as it spells them, and no ``--flag=value``."""

    names: tuple[str, ...]
    targets: tuple[str, ...]
    kind: str
    choices: tuple[str, ...] = ()

    @property
    def takes_value(self) -> bool:
        return self.kind not in ("on", "off")


def _f(names: str, targets: str, kind: str, choices: tuple[str, ...] = ()) -> Flag:
    return Flag(tuple(names.split()), tuple(targets.split()), kind, choices)


_SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark", "ngram-simple",
               "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
_KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

FLAGS: tuple[Flag, ...] = (
    _f("-m --model", "model.path", "str"),
    _f("--host", "hostnames", "strlist"),
    _f("--port", "port", "int"),
    _f("-t --threads", "cpuparams.n_threads", "int"),
    _f("-tb --threads-batch", "cpuparams_batch.n_threads", "int"),
    _f("--threads-http", "n_threads_http", "int"),
    _f("-np --parallel", "n_parallel", "int"),
    _f("-c --ctx-size", "n_ctx", "int"),
    _f("-n --predict --n-predict", "n_predict", "int"),
    _f("-b --batch-size", "n_batch", "int"),
    _f("-ub --ubatch-size", "n_ubatch", "int"),
    _f("-cb --cont-batching", "cont_batching", "on"),
    _f("-nocb --no-cont-batching", "cont_batching", "off"),
    _f("-kvu --kv-unified", "kv_unified", "on"),
    _f("-no-kvu --no-kv-unified", "kv_unified", "off"),
    _f("--kv-unified-per-slot", "kv_unified_per_slot", "int"),
    _f("--swa-full", "swa_full", "on"),
    _f("-kvo --kv-offload", "no_kv_offload", "off"),
    _f("-nkvo --no-kv-offload", "no_kv_offload", "on"),
    _f("-ctk --cache-type-k", "cache_type_k", "enum:ggml_type", _KV_TYPES),
    _f("-ctv --cache-type-v", "cache_type_v", "enum:ggml_type", _KV_TYPES),
    _f("-fa --flash-attn", "flash_attn_type", "flash_attn"),
    _f("-ngl --gpu-layers --n-gpu-layers", "n_gpu_layers", "gpu_layers"),
    _f("--context-shift", "ctx_shift", "on"),
    _f("--no-context-shift", "ctx_shift", "off"),
    _f("--warmup", "warmup", "on"),
    _f("--no-warmup", "warmup", "off"),
    # the server's prompt cache: in the slot (cache_prompt) and in host memory (--cache-ram, MiB)
    _f("--cache-prompt", "cache_prompt", "on"),
    _f("--no-cache-prompt", "cache_prompt", "off"),
    _f("-cram --cache-ram", "cache_ram_mib", "int"),
    _f("--cache-reuse", "n_cache_reuse", "int"),
    _f("--cache-idle-slots", "cache_idle_slots", "on"),
    _f("--no-cache-idle-slots", "cache_idle_slots", "off"),
    _f("-ctxcp --ctx-checkpoints --swa-checkpoints", "n_ctx_checkpoints", "int"),
    _f("-sps --slot-prompt-similarity", "slot_prompt_similarity", "float"),
    _f("--slot-save-path", "slot_save_path", "str"),  # enables POST /slots/{id}?action=erase (and save, restore)
    # speculative decoding
    _f("--spec-type", "speculative.types", "enums:common_speculative_type", _SPEC_TYPES),
    _f("--spec-draft-n-max", "speculative.draft.n_max", "int"),
    _f("--spec-draft-n-min", "speculative.draft.n_min", "int"),
    _f("--spec-draft-p-min --draft-p-min", "speculative.draft.p_min", "float"),
    _f("--spec-draft-p-split --draft-p-split", "speculative.draft.p_split", "float"),
    _f("--spec-draft-model -md --model-draft", "speculative.draft.mparams.path", "str"),
    _f("--spec-draft-ngl -ngld --gpu-layers-draft --n-gpu-layers-draft", "speculative.draft.n_gpu_layers",
       "gpu_layers"),
    _f("--spec-draft-type-k -ctkd --cache-type-k-draft", "speculative.draft.cache_type_k", "enum:ggml_type",
       _KV_TYPES),
    _f("--spec-draft-type-v -ctvd --cache-type-v-draft", "speculative.draft.cache_type_v", "enum:ggml_type",
       _KV_TYPES),
    _f("--spec-draft-threads -td --threads-draft", "speculative.draft.cpuparams.n_threads", "int"),
    _f("--spec-draft-threads-batch -tbd --threads-batch-draft", "speculative.draft.cpuparams_batch.n_threads",
       "int"),
    _f("--spec-ngram-mod-n-min", "speculative.ngram_mod.n_min", "int"),
    _f("--spec-ngram-mod-n-max", "speculative.ngram_mod.n_max", "int"),
    _f("--spec-ngram-mod-n-match", "speculative.ngram_mod.n_match", "int"),
    _f("--spec-ngram-simple-size-n", "speculative.ngram_simple.size_n", "int"),
    _f("--spec-ngram-simple-size-m", "speculative.ngram_simple.size_m", "int"),
    _f("--spec-ngram-simple-min-hits", "speculative.ngram_simple.min_hits", "int"),
    _f("--spec-ngram-map-k-size-n", "speculative.ngram_map_k.size_n", "int"),
    _f("--spec-ngram-map-k-size-m", "speculative.ngram_map_k.size_m", "int"),
    _f("--spec-ngram-map-k-min-hits", "speculative.ngram_map_k.min_hits", "int"),
    _f("--spec-ngram-map-k4v-size-n", "speculative.ngram_map_k4v.size_n", "int"),
    _f("--spec-ngram-map-k4v-size-m", "speculative.ngram_map_k4v.size_m", "int"),
    _f("--spec-ngram-map-k4v-min-hits", "speculative.ngram_map_k4v.min_hits", "int"),
    # sampling defaults (a request's own fields override them)
    _f("-s --seed", "sampling.seed", "seed"),
    _f("--temp --temperature", "sampling.temp", "float"),
    # the HTTP side
    _f("--metrics", "endpoint_metrics", "on"),
    _f("--props", "endpoint_props", "on"),
    _f("--slots", "endpoint_slots", "on"),
    _f("--no-slots", "endpoint_slots", "off"),
    _f("--ui --webui", "ui", "on"),
    _f("--no-ui --no-webui", "ui", "off"),
    _f("--keep", "n_keep", "int"),
    _f("-cms --checkpoint-min-step", "checkpoint_min_step", "int"),
    _f("--perf", "no_perf", "off"),
    _f("--no-perf", "no_perf", "on"),
    _f("--reasoning-format", "reasoning_format", "enum:common_reasoning_format",
       ("none", "auto", "deepseek-legacy", "deepseek")),
    _f("--chat-template", "chat_template", "str"),
    _f("--jinja", "use_jinja", "on"),
    _f("--no-jinja", "use_jinja", "off"),
    _f("-a --alias", "model_alias", "strset"),
    _f("-to --timeout", "timeout_read timeout_write", "int"),
    _f("--sleep-idle-seconds", "sleep_idle_seconds", "int"),
    _f("-lv --verbosity --log-verbosity", "verbosity", "int"),
)

BY_NAME: dict[str, Flag] = {name: flag for flag in FLAGS for name in flag.names}

# Threads: llama-server's -t also sets the batch threads unless -tb is given (common's postprocess_cpu_params).
_FOLLOWS = {"cpuparams.n_threads": "cpuparams_batch.n_threads"}


@dataclass(frozen=True)
class Setting:
    """One attribute to set: its dotted path on ``CommonParams``, the value as parsed, and the flag it came from."""

    target: str
    value: Any
    flag: str


_INT32 = (-(2 ** 31), 2 ** 31 - 1)
_FLASH_ATTN = {"on": "enabled", "enabled": "enabled", "true": "enabled", "1": "enabled", "off": "disabled",
               "disabled": "disabled", "false": "disabled", "0": "disabled", "auto": "auto", "-1": "auto"}


def _number(flag: str, raw: str, cast: Callable[[str], Any]) -> Any:
    try:
        value = cast(raw)
    except ValueError:
        raise FlagError(f"llama-server flag {flag} takes a number, not {raw!r}") from None
    if cast is int and not _INT32[0] <= value <= _INT32[1]:
        raise FlagError(f"llama-server flag {flag} takes a 32-bit integer, not {raw}")
    return value


def _value(flag: Flag, name: str, raw: str) -> Any:
    kind = flag.kind
    if kind == "int":
        return _number(name, raw, int)
    if kind == "seed":  # llama-server's stoul then uint32: -1 (random) is 0xFFFFFFFF
        try:
            return int(raw) & 0xFFFFFFFF
        except ValueError:
            raise FlagError(f"llama-server flag {name} takes a number, not {raw!r}") from None
    if kind == "float":
        return _number(name, raw, float)
    if kind == "str":
        return raw
    if kind == "strlist":
        return [p for p in raw.split(",") if p]
    if kind == "strset":
        return {p for p in raw.split(",") if p}
    if kind == "gpu_layers":
        return {"auto": -1, "all": -2}.get(raw) if raw in ("auto", "all") else _number(name, raw, int)
    if kind == "flash_attn":
        if raw not in _FLASH_ATTN:
            raise FlagError(f"llama-server flag {name} takes on, off or auto (or enabled / disabled, true / false, "
                            f"1 / 0 / -1), not {raw!r}")
        return ("enum:llama_flash_attn_type", _FLASH_ATTN[raw])
    if kind.startswith(("enum:", "enums:")):
        values = raw.split(",") if kind.startswith("enums:") else [raw]
        for v in values:
            if flag.choices and v not in flag.choices:
                raise FlagError(f"llama-server flag {name} takes one of {', '.join(flag.choices)}, not {v!r}")
        enum = kind.split(":", 1)[1]
        return [("enum:" + enum, v) for v in values] if kind.startswith("enums:") else ("enum:" + enum, raw)
    raise AssertionError(f"unknown flag kind {kind}")  # pragma: no cover (the table above is closed)


def parse(args: list[str]) -> list[Setting]:
    """The settings a llama-server flag list makes, in order (a later flag wins, as llama-server reads them).

    Raises :class:`FlagError` naming the first flag the prebuilt engine does not map, or a value it cannot
    read (as llama-server would: ``--flag=value`` is refused, as it refuses it)."""
    out: list[Setting] = []
    given: set[str] = set()
    i = 0
    while i < len(args):
        token = str(args[i])
        flag = BY_NAME.get(token)
        if flag is None:
            name = token.partition("=")[0]
            if token.startswith("--") and "=" in token and name in BY_NAME:
                raise FlagError(f"llama-server does not read {token!r}: write {name} and its value as two arguments")
            what = "a value, not a flag" if not token.startswith("-") else "not mapped onto the prebuilt engine"
            raise FlagError(f"llama-server argument {token!r} is {what} (xllamacpp); {BINARY_HINT}")
        if flag.takes_value:
            if i + 1 >= len(args):
                raise FlagError(f"llama-server flag {token} needs a value")
            i += 1  # the next argument is the value, whatever it looks like (llama-server reads -fa -1 so)
            value = _value(flag, token, str(args[i]))
        else:
            value = flag.kind == "on"
        for target in flag.targets:
            out.append(Setting(target, value, token))
            given.add(target)
        i += 1
    for leader, follower in _FOLLOWS.items():
        if leader in given and follower not in given:
            lead = [s for s in out if s.target == leader][-1]
            out.append(Setting(follower, lead.value, lead.flag))
    return out


def check(args: list[str]) -> None:
    """Raise :class:`FlagError` if the prebuilt engine cannot take *args* (what config validation calls)."""
    parse(args)


def _resolve(xlc: Any, value: Any) -> Any:
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return [_resolve(xlc, v) for v in value]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and value[0].startswith("enum:"):
        enum = value[0].split(":", 1)[1]
        member = _ENUM_PREFIX[enum] + value[1].upper().replace("-", "_")
        try:
            return getattr(getattr(xlc, enum), member)
        except AttributeError:
            raise FlagError(f"this xllamacpp build has no {enum} {value[1]!r}; {BINARY_HINT}") from None
    return value


def apply(params: Any, settings: list[Setting], xlc: Any) -> None:
    """Set each setting on *params* (an ``xllamacpp.CommonParams``), resolving enum values in module *xlc*.

    The binding's nested parameter objects (``cpuparams``, ``speculative.draft``) are views into the one C++
    struct, so setting an attribute of one sets it on *params*.  A value the binding refuses (out of its C
    type's range) is a :class:`FlagError` naming the flag."""
    for s in settings:
        *path, last = s.target.split(".")
        obj = params
        for p in path:
            obj = getattr(obj, p)
        try:
            setattr(obj, last, _resolve(xlc, s.value))
        except (OverflowError, TypeError, ValueError) as exc:
            raise FlagError(f"llama-server flag {s.flag}: the prebuilt engine cannot take {s.value!r} ({exc})") \
                from None
