"""What the tool can find out by itself about the host and an endpoint."""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional
from urllib.parse import urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from typing_extensions import TypedDict

from ..errors import ConfigError
from ..json_types import JSONObject, JSONValue
from ..ledger.records import json_number
from ..levers import registry

if TYPE_CHECKING:
    from ..config import LoadedExperiment

METRIC_PREFIXES = ("vllm:", "sglang:", "llamacpp:")
#: The llama.cpp ``/props`` keys discovery keeps: its own, and those the levers' discovered paths name (a lever's
#: ``props.X``: :mod:`leverbench.levers`).
_PROPS_KEEP = tuple(dict.fromkeys(("model_path", "total_slots", "build_info", "n_ctx", "chat_template_caps",
                                   "modalities", *registry.props_keys())))


class HostInfo(TypedDict):
    """The host the tool runs on (the ledger header's ``host``)."""

    hostname: str
    os: str
    cpu: str
    cores: Optional[int]
    python: str


def host_info() -> HostInfo:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }


def _split(base_url: str) -> tuple[str, str]:
    """(scheme://host:port, path without a trailing slash) of a base URL; a full
    ``.../chat/completions`` URL counts as its base."""
    parts = urlsplit(base_url.strip())
    path = parts.path.rstrip("/").removesuffix("/chat/completions")
    return f"{parts.scheme}://{parts.netloc}", path


def api_base(base_url: str) -> str:
    """Where the OpenAI-style API lives (``/chat/completions``, ``/models``).

    ``http://h:p`` → ``http://h:p/v1`` (a bare server: the engines' convention);
    any base with a path is used as given, OpenAI's convention: ``http://h:p/v1``,
    ``https://h/v1beta/openai``, ``http://proxy/llama/v1``.
    """
    origin, path = _split(base_url)
    return origin + (path or "/v1")


def api_root(base_url: str) -> str:
    """Where the engine's own endpoints live (/health, /props, /metrics, /tokenize, /version).

    The base without a trailing ``/v1`` (``http://proxy/llama/v1`` → ``http://proxy/llama``);
    a base whose path ends otherwise (``https://h/v1beta/openai``) → scheme, host and port.
    """
    origin, path = _split(base_url)
    return origin + path.removesuffix("/v1") if not path or path.endswith("/v1") else origin


def _with_query(url: str, base_url: str) -> str:
    """*url* with the base URL's query string kept (Azure OpenAI needs its ``?api-version=...`` on every call)."""
    query = urlsplit(base_url.strip()).query
    return f"{url}?{query}" if query else url


def chat_url(base_url: str) -> str:
    return _with_query(api_base(base_url) + "/chat/completions", base_url)


def models_url(base_url: str) -> str:
    return _with_query(api_base(base_url) + "/models", base_url)


async def _get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> JSONValue:
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _get_text(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str | None:
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            return await resp.text() if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


REACH_TIMEOUT_S = 5.0  # discovery's first look at an endpoint: no answer within this, and it is left out


async def reachable(session: aiohttp.ClientSession, root: str, headers: dict[str, str]) -> bool:
    """Whether anything answers HTTP at *root* (any status counts) within ``REACH_TIMEOUT_S``."""
    try:
        async with session.get(root + "/health", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=REACH_TIMEOUT_S)) as resp:
            await resp.read()
            return True
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False


async def endpoint_info(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], *,
                        metrics_url: str | None = None, metrics_headers: dict[str, str] | None = None,
                        known: Optional[JSONObject] = None) -> JSONObject:
    """What the endpoint says about itself: llama.cpp ``/props`` and ``/slots``, vLLM ``/version``,
    SGLang ``/get_server_info``, the model list, one ``/metrics`` scrape; and from all of it
    (plus ``known``: what the runner knows already, e.g. the embedded engine's build) the
    normalised serving condition ``knobs`` (see :func:`knobs`).  Endpoints that do not answer
    200 with JSON are simply absent.  ``metrics_headers``: what to send to ``metrics_url`` (the
    runner passes the key only where the arm allows it; default: ``headers``)."""
    root = api_root(base_url)
    if not await reachable(session, root, headers):  # don't spend a minute of timeouts on a host that is not there
        return {"unreachable": True, "knobs": {}}
    out: JSONObject = {}  # what the endpoint said (an engine's JSON, kept as it came) and the knobs made of it
    raw: JSONObject = {"known": known or {}}
    props = await _get_json(session, root + "/props", headers)
    if isinstance(props, dict):
        raw["props"] = props
        out["props"] = {k: props[k] for k in _PROPS_KEEP if k in props}
        gen = props.get("default_generation_settings")
        if isinstance(gen, dict):
            out["props"]["n_ctx"] = gen.get("n_ctx", out["props"].get("n_ctx"))
        if "sim" in props:
            out["props"]["sim"] = props["sim"]
        raw["slots"] = await _get_json(session, root + "/slots", headers)
    version = await _get_json(session, root + "/version", headers)
    if isinstance(version, dict):
        out["version"] = raw["version"] = version
    server_info = await _get_json(session, root + "/get_server_info", headers)
    if isinstance(server_info, dict):
        raw["server_info"] = server_info
        out["server_info"] = {k: server_info[k] for k in _SERVER_INFO_KEEP if k in server_info}
    models = await _get_json(session, models_url(base_url), headers)
    if isinstance(models, dict) and isinstance(models.get("data"), list):
        raw["models"] = [m for m in models["data"] if isinstance(m, dict)]
        out["models"] = [m.get("id") for m in raw["models"]]
        if isinstance(models.get("sim"), dict):
            out["sim"] = raw["sim"] = models["sim"]
    text = await _get_text(session, metrics_url or root + "/metrics",
                           headers if metrics_headers is None else metrics_headers)
    raw["metrics"] = metric_labels(text) if text is not None else None
    if raw["metrics"] and "vllm:cache_config_info" in raw["metrics"]:
        out["cache_config"] = raw["metrics"]["vllm:cache_config_info"][0]
    out["knobs"] = knobs(raw)
    return out


#: No tokenizer in use has a token longer than this many characters (the longest are runs of spaces or of one
#: symbol, tens of characters): a prompt of N characters is at least N / this tokens, whatever the model.
MAX_CHARS_PER_TOKEN = 256


def check_prompts_fit(exp: LoadedExperiment, arm: str, discovered: Mapping[str, JSONValue]) -> None:
    """ConfigError naming the case when a case's first call (system prompt, documents and prompt) cannot fit the
    context length *arm*'s endpoint reports (``knobs.context_length``, :func:`knobs`) whatever its tokenizer
    (:data:`MAX_CHARS_PER_TOKEN`): refused before anything is sent, as the engine would refuse every such call
    (after the whole prompt went out).  An endpoint that reports no context length is not checked."""
    from ..workload.cases import case_size_chars  # noqa: PLC0415 (the run's cases; discovery itself needs none)

    found = discovered.get("knobs")
    ctx = found.get("context_length") if isinstance(found, dict) else None
    if not isinstance(ctx, int) or isinstance(ctx, bool) or ctx <= 0:
        return
    for i, case in enumerate(c for c in exp.spec.cases if not c.variant_of):  # (a variant adds a few words)
        chars = case_size_chars(exp, case)
        if chars // MAX_CHARS_PER_TOKEN > ctx:
            what = "documents" if case.documents else "system_file" if case.system_file else "prompt"
            raise ConfigError(str(exp.path), f"cases[{i}].{what}",
                              f"the first call of case {case.name!r} is {chars:,} characters, at least "
                              f"{chars // MAX_CHARS_PER_TOKEN:,} tokens with any tokenizer, past the "
                              f"{ctx:,}-token context the endpoint of arm {arm!r} reports; nothing was sent. "
                              "Shorten the case's text, or serve the model with a longer context")


def engine_samples(text: str) -> Iterator[Any]:
    """The engine samples (vLLM, SGLang, llama.cpp names) of a Prometheus exposition, without the
    ``_created`` timestamps Python's prometheus_client writes for every counter and histogram (in the
    text format as a gauge family ``NAME_created`` of its own, as vLLM's ``/metrics`` shows them: a
    Unix time, not a measurement).  Raises ValueError (or the parser's error) on a malformed text."""
    families = list(text_string_to_metric_families(text))
    created = {f.name + "_created" for f in families if f.type in ("counter", "histogram", "summary")}
    for fam in families:
        for s in fam.samples:
            if s.name.startswith(METRIC_PREFIXES) and s.name not in created:
                yield s


def metric_labels(text: str) -> dict[str, list[dict[str, str]]] | None:
    """Engine metric samples (vLLM, SGLang, llama.cpp names) → their label sets, by sample name;
    None when the text is not a Prometheus exposition."""
    out: dict[str, list[dict[str, str]]] = {}
    try:
        for s in engine_samples(text):
            out.setdefault(s.name, []).append(dict(s.labels))
    except Exception:  # noqa: BLE001 - a malformed exposition is simply not used
        return None
    return out


def knobs(raw: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    """The serving condition as the endpoint states it, normalised across engines; only what was found.

    ``raw``: ``props`` (llama.cpp /props), ``slots`` (/slots), ``version`` (vLLM /version),
    ``server_info`` (SGLang /get_server_info), ``models`` (model-list entries), ``sim`` (the
    simulator's marker), ``metrics`` (:func:`metric_labels` of one scrape), ``known`` (the
    embedded engine's own facts: ``engine_build``, ``engine_args``, ``model_file``, ``model_id``, ``parallel``,
    ``ctx_size``, which stand in for what a llama.cpp endpoint that did not answer would have said).

    - ``engine``: ``llama.cpp`` (a /props answer, models owned by ``llamacpp`` or ``llamacpp:``
      metrics), ``vllm`` (owned by ``vllm`` or ``vllm:`` metrics), ``sglang`` (owned by ``sglang``,
      ``sglang:`` metrics or a /get_server_info answer);
    - ``simulator``: true when the answer carries the simulator's ``sim`` marker (a test
      instrument: never report it as the engine it imitates);
    - every lever's knob as its module finds it in these answers for the engine found
      (:attr:`leverbench.levers.Lever.discover`: what each engine says of it, where, and which source is trusted
      first; e.g. the engine's version, the served model and its file, the slots, the prefix cache, the drafter,
      the context length, the KV-cache dtype, chunked prefill).
    No engine states its GPU model; that stays a declared condition.
    """
    props, info = raw.get("props"), raw.get("server_info")
    models, metrics, known = raw.get("models") or [], raw.get("metrics") or {}, raw.get("known") or {}
    owners = {m.get("owned_by") for m in models}
    prefixes = {name.split(":", 1)[0] for name in metrics}
    k: dict[str, JSONValue] = {}
    llamacpp = "llamacpp" in owners or "llamacpp" in prefixes or "llama.cpp" in str(known.get("engine"))
    if isinstance(props, dict) or llamacpp:
        k["engine"] = "llama.cpp"
    elif "vllm" in owners or "vllm" in prefixes:
        k["engine"] = "vllm"
    elif "sglang" in owners or "sglang" in prefixes or isinstance(info, dict):
        k["engine"] = "sglang"
    engine = k.get("engine")
    if isinstance(raw.get("sim"), dict) or (isinstance(props, dict) and isinstance(props.get("sim"), dict)):
        k["simulator"] = True
    for lever in registry.levers():
        if lever.discover is not None:
            _put(k, lever.name, lever.discover(raw, engine if isinstance(engine, str) else None))
    return {key: v for key, v in k.items() if v is not None}


#: The SGLang ``/get_server_info`` keys discovery keeps: the levers' (:mod:`leverbench.levers`).
_SERVER_INFO_KEEP = registry.server_info_keys()


def _put(k: dict[str, JSONValue], key: str, value: JSONValue) -> None:
    if value is not None and value != "" and key not in k:
        k[key] = value


async def scrape_metrics(session: aiohttp.ClientSession, url: str,
                         headers: dict[str, str]) -> dict[str, float | str] | None:
    """Serving-engine Prometheus samples (vLLM, SGLang, llama.cpp names), or None if not offered.

    A sample's label sets other than ``model_name`` / ``engine`` stay apart; those two are summed over.
    The ``_created`` samples Python's prometheus_client adds to every counter and histogram (vLLM's:
    a Unix timestamp, not a measurement) are left out.
    A NaN or infinite value (legal in the exposition format) is kept as "NaN", "+Inf" or "-Inf"."""
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError):
        return None
    samples: dict[str, float] = {}
    try:
        for s in engine_samples(text):
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("model_name", "engine"))
            key = f"{s.name}{{{labels}}}" if labels else s.name
            samples[key] = samples.get(key, 0.0) + float(s.value)
    except Exception:  # noqa: BLE001 - a malformed exposition is simply not used
        return None
    return {k: json_number(v) for k, v in samples.items()} or None
