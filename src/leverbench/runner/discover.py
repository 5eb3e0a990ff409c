"""What the tool can find out by itself about the host and an endpoint."""

from __future__ import annotations

import os
import platform
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ..ledger.records import json_number

METRIC_PREFIXES = ("vllm:", "sglang:", "llamacpp:")
_PROPS_KEEP = ("model_path", "total_slots", "build_info", "n_ctx", "chat_template_caps", "modalities")


def host_info() -> dict[str, Any]:
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


def api_root(base_url: str) -> str:
    """``http://h:p/v1`` → ``http://h:p`` (where /health, /props and /metrics live)."""
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def chat_url(base_url: str) -> str:
    return api_root(base_url) + "/v1/chat/completions"


async def _get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any | None:
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def endpoint_info(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str]) -> dict[str, Any]:
    root = api_root(base_url)
    out: dict[str, Any] = {}
    props = await _get_json(session, root + "/props", headers)
    if isinstance(props, dict):
        out["props"] = {k: props[k] for k in _PROPS_KEEP if k in props}
        gen = props.get("default_generation_settings")
        if isinstance(gen, dict):
            out["props"]["n_ctx"] = gen.get("n_ctx", out["props"].get("n_ctx"))
        if "sim" in props:
            out["props"]["sim"] = props["sim"]
    version = await _get_json(session, root + "/version", headers)
    if isinstance(version, dict):
        out["version"] = version
    models = await _get_json(session, root + "/v1/models", headers)
    if isinstance(models, dict) and isinstance(models.get("data"), list):
        out["models"] = [m.get("id") for m in models["data"] if isinstance(m, dict)]
    return out


async def scrape_metrics(session: aiohttp.ClientSession, url: str,
                         headers: dict[str, str]) -> dict[str, float | str] | None:
    """Serving-engine Prometheus samples (vLLM, SGLang, llama.cpp names), or None if not offered.

    A sample's label sets other than ``model_name`` / ``engine`` stay apart; those two are summed over.
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
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if not s.name.startswith(METRIC_PREFIXES):
                    continue
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("model_name", "engine"))
                key = f"{s.name}{{{labels}}}" if labels else s.name
                samples[key] = samples.get(key, 0.0) + float(s.value)
    except Exception:  # noqa: BLE001 - a malformed exposition is simply not used
        return None
    return {k: json_number(v) for k, v in samples.items()} or None
