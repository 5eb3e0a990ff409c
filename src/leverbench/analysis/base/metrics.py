"""The server's own account from its Prometheus metrics, scraped before and after each arm's block.

For a counter c, Δc = c(after) − c(before), summed over label sets (SGLang and
vLLM samples carry labels such as ``tp_rank`` or ``finished_reason``; every
label set of a name is one part of the whole).  A sample that is not a finite
number (NaN, ±Inf: legal in the exposition format, recorded as a string) is
left out.  Per arm:

- queue, prefill, decode seconds per request = Δ<histogram>_sum / Δ<histogram>_count
  (vLLM ``vllm:request_{queue,prefill,decode}_time_seconds``; SGLang ``sglang:queue_time_seconds``);
- prefill and decode rates = Δtokens / Δseconds (llama.cpp ``llamacpp:prompt_tokens_total`` /
  ``llamacpp:prompt_seconds_total``, ``llamacpp:tokens_predicted_total`` /
  ``llamacpp:tokens_predicted_seconds_total``; vLLM prefill: uncached prompt tokens
  (Δ``vllm:prompt_tokens`` − Δ``vllm:prefix_cache_hits``) / Δ``vllm:request_prefill_time_seconds_sum``),
  and uncached prompt tokens per request = that numerator / Δ``vllm:request_prefill_time_seconds_count``;
  vLLM decode: (Δ``vllm:generation_tokens`` − Δ``vllm:request_decode_time_seconds_count``) /
  Δ``vllm:request_decode_time_seconds_sum`` (vLLM's decode phase runs from the first token, which the
  prefill produced, to the last: a request's n tokens take n − 1 of it);
- prefix-cache hit share = Δhits / Δqueries (vLLM ``vllm:prefix_cache_hits`` / ``queries``, in tokens;
  SGLang Δ``sglang:cached_tokens_total`` / Δ``sglang:prompt_tokens_total``), cached prompt tokens =
  Δ``llamacpp:prompt_tokens_cached_total``; SGLang's ``sglang:cache_hit_rate`` gauge as read after the
  block (its last prefill batch's rate: shown, not used as the block's share);
- drafter acceptance = Δaccepted / Δdraft tokens (``vllm:spec_decode_num_{accepted,draft}_tokens``,
  ``llamacpp:spec_decode_num_{accepted,draft}_tokens_total``); SGLang's ``sglang:spec_accept_length`` gauge.

The lever figures (shares, deltas and gauges) are the levers' own tables (:class:`leverbench.levers.MetricTable`
in each lever's module), in the registry's order; a new lever's figures are keys of the row as well (the schema
takes a number under any key it does not name), and a lever whose figure would take the name of one of the
engine's figures above or of the row's own keys is refused when this module is imported.

Attribution: an arm's row covers what happened on its endpoint between its
``before`` and ``after`` scrapes (its turns, probes and sentinels; load stages
have their own scrapes).  When another arm shares the endpoint and its window
overlaps (interleaved order), the counters mix both arms' calls: the row says
``attribution: "mixed"`` with whom, and no per-arm figure is taken from it.

A sample that is not a finite number (the ledger keeps NaN/±Inf as "NaN", "+Inf", "-Inf") is skipped:
a label set with such a value before or after is left out of Δc, and a figure none of whose samples
are numbers is absent.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence, Union
from urllib.parse import urlsplit

from typing_extensions import TypeAlias, TypedDict

from ...json_types import JSONValue
from ...levers import Lever, registry
from ...schema.rate_rows import ArmMetrics, ServerMetricsRow  # the rows this module builds (typed there)

#: One scrape's samples: sample name with its labels → value (a number, or "NaN" / "+Inf" / "-Inf").
Samples: TypeAlias = Mapping[str, Union[float, str]]


class MetricsRecord(TypedDict, total=False):
    """A ledger ``metrics`` record, as far as this module reads it."""

    arm: str
    when: str
    t: float
    samples: dict[str, Union[float, str]]


#: A window: the (start, end) metrics records of one block.
Window: TypeAlias = tuple[MetricsRecord, MetricsRecord]


_RATIO_PER_REQUEST = {
    "queue_s_per_request": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "prefill_s_per_request": ("vllm:request_prefill_time_seconds",),
    "decode_s_per_request": ("vllm:request_decode_time_seconds",),
}
_RATES = {  # name: (tokens counter, seconds counter)
    "prefill_tps": ("llamacpp:prompt_tokens_total", "llamacpp:prompt_seconds_total"),
    "decode_tps": ("llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total"),
}
_UNCACHED_PER_REQUEST = "uncached_prompt_tokens_per_request"
#: The names a lever's figure may not take: the engine's own figures (built above, not from a lever's table) and
#: the ``server_metrics`` row's own keys (its arm, windows, attribution).
_RESERVED = frozenset({*_RATIO_PER_REQUEST, *_RATES, _UNCACHED_PER_REQUEST,
                       *(ServerMetricsRow.__required_keys__ | ServerMetricsRow.__optional_keys__)
                       - (ArmMetrics.__required_keys__ | ArmMetrics.__optional_keys__)})


def check_figure_names(levers: Sequence[Lever]) -> None:
    """ValueError naming the lever when one of *levers* declares a figure that takes the name of one of the
    engine's own figures or of the row's own keys: its figures land in the arm's row beside them, and it would
    overwrite one (or break the row's schema)."""
    for x in levers:
        taken = sorted(set(x.metrics.figures()) & _RESERVED)
        if taken:
            raise ValueError(f"lever {x.name!r} declares the server figure(s) {', '.join(taken)} in its MetricTable: "
                             "the name of one of the engine's own figures or of the server_metrics row's own keys "
                             f"(name the lever's figures after it, e.g. {x.name}_tokens)")


check_figure_names(registry.levers())
#: name: (numerator counter, denominator counter); the first that both engines' counters give wins
_SHARES = {name: (num, den) for x in registry.levers() for name, num, den in x.metrics.shares}
_DELTAS = {name: counter for x in registry.levers() for name, counter in x.metrics.deltas}
_GAUGES = {name: gauge for x in registry.levers() for name, gauge in x.metrics.gauges}
#: vLLM's counters of prompt tokens served without a prefill (a cache's hits): left out of its prefill rate.
_SERVED_PROMPT = tuple(c for x in registry.levers() for c in x.metrics.served_prompt)


def numeric(v: object) -> bool:
    """Whether a scraped sample is a finite number (not "NaN", "+Inf", "-Inf", nor anything else)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _delta(before: Samples, after: Samples, name: str) -> float | None:
    """Δ of a counter over its label sets with numeric samples; accepts the name with or without ``_total``."""
    names = {name, name + "_total", name.removesuffix("_total")}
    keys = [k for k in after if k.split("{", 1)[0] in names and numeric(after[k]) and numeric(before.get(k, 0.0))]
    if not keys:
        return None
    return sum(float(after[k]) - float(before.get(k, 0.0)) for k in keys)


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def arm_metrics(before: Samples, after: Samples) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, hists in _RATIO_PER_REQUEST.items():
        for h in hists:
            v = _ratio(_delta(before, after, h + "_sum"), _delta(before, after, h + "_count"))
            if v is not None:
                out[key] = v
                break
    for key, (tok, sec) in _RATES.items():
        if (v := _ratio(_delta(before, after, tok), _delta(before, after, sec))) is not None:
            out[key] = v
    prompt = _delta(before, after, "vllm:prompt_tokens")
    if prompt is not None:
        uncached = prompt - sum(_delta(before, after, c) or 0.0 for c in _SERVED_PROMPT)
        if (v := _ratio(uncached, _delta(before, after, "vllm:request_prefill_time_seconds_sum"))) is not None:
            out["prefill_tps"] = v
        if (v := _ratio(uncached, _delta(before, after, "vllm:request_prefill_time_seconds_count"))) is not None:
            out[_UNCACHED_PER_REQUEST] = v
    generated = _delta(before, after, "vllm:generation_tokens")
    decoded = _delta(before, after, "vllm:request_decode_time_seconds_count")
    if generated is not None and decoded is not None:
        if (v := _ratio(generated - decoded,
                        _delta(before, after, "vllm:request_decode_time_seconds_sum"))) is not None:
            out["decode_tps"] = v
    for key, (num, den) in _SHARES.items():
        n = _delta(before, after, num)
        if n is None and key.startswith("sglang_"):
            n = 0.0  # SGLang writes a counter's first sample at its first increment: absent means none yet
        if (v := _ratio(n, _delta(before, after, den))) is not None:
            out.setdefault(key.removeprefix("llamacpp_").removeprefix("sglang_"), v)
    for key, name in _DELTAS.items():
        if (v := _delta(before, after, name)) is not None:
            out[key] = v
    for key, name in _GAUGES.items():
        vals = [float(v) for k, v in after.items() if k.split("{", 1)[0] == name and numeric(v)]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0", "ip6-localhost"}


def _endpoint(header_arm: Mapping[str, JSONValue], metrics_url: Optional[str], arm: str) -> str:
    """Which server an arm's counters come from: its metrics URL, else its endpoint (each embedded engine is
    its own); the host's loopback spellings (localhost, 127.0.0.1, ::1) are one, and case does not count."""
    ep = metrics_url or header_arm.get("endpoint")
    if ep in (None, "embedded"):
        return f"embedded:{arm}"
    parts = urlsplit(str(ep))
    host = (parts.hostname or "").lower()
    host = "loopback" if host in _LOOPBACK or host.startswith("127.") else host
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme, 0)
    except ValueError:  # a port that is no number (an edited header): a server of its own, shared with none
        return f"unparsed:{ep}"
    return f"{host}:{port}{parts.path.rstrip('/') if metrics_url else ''}"


def windows(metrics_records: list[MetricsRecord], arm: str, start: str, end: str) -> list[Window]:
    """The arm's (start, end) scrape pairs: each *start* scrape with the next *end* scrape of the same arm
    (a resumed run adds a window; one whose engine restarted starts its counters again, which a window
    never spans)."""
    out: list[Window] = []
    opened: Optional[MetricsRecord] = None
    for m in metrics_records:
        if m.get("arm") != arm:
            continue
        if m.get("when") == start:
            opened = m
        elif m.get("when") == end and opened is not None:
            out.append((opened, m))
            opened = None
    return out


def summed(pairs: list[Window]) -> tuple[dict[str, float], dict[str, Union[float, str]]]:
    """(before, after) samples whose counters' Δ is the sum of the windows' Δs (a sample not a finite number
    in a window leaves that window out for it); gauges as read at the last window's end."""
    after: dict[str, Union[float, str]] = {}
    for b, a in pairs:
        for k, v in a["samples"].items():
            if numeric(v) and numeric(b0 := b["samples"].get(k, 0.0)):
                after[k] = float(after.get(k, 0.0)) + float(v) - float(b0)
    if pairs:
        for k, v in pairs[-1][1]["samples"].items():
            if k.split("{", 1)[0] in _GAUGES.values():
                after[k] = v
    return {}, after


def server_metrics(metrics_records: list[MetricsRecord], arms: list[str],
                   header: Optional[Mapping[str, JSONValue]] = None,
                   start: str = "before", end: str = "after") -> list[ServerMetricsRow]:
    """Per arm, the server's figures over its blocks (every *start* → next *end* scrape pair, Δs summed), with
    ``attribution`` "own" or "mixed" (see the module docstring), ``windows`` (how many) and ``window``
    [first start, last end]."""
    header = header or {}
    config, header_arms = header.get("config"), header.get("arms")
    config_arms = config.get("arms", []) if isinstance(config, dict) else []
    if not isinstance(config_arms, list):  # a config's arms are a list (anything else names no arm's metrics_url)
        config_arms = []
    murls = {a.get("name"): a.get("metrics_url") for a in config_arms if isinstance(a, dict)}
    endpoint = {}
    for a in arms:
        found = header_arms.get(a) if isinstance(header_arms, dict) else None
        url = murls.get(a)
        endpoint[a] = _endpoint(found if isinstance(found, dict) else {}, url if isinstance(url, str) else None, a)
    pairs = {a: w for a in arms if (w := windows(metrics_records, a, start, end))}
    out = []
    for arm, ws in pairs.items():
        figures = arm_metrics(*summed(ws))
        if not figures:
            continue
        spans = [(b.get("t", 0.0), a.get("t", 0.0)) for b, a in ws]
        sharing = [o for o in arms if o != arm and endpoint[o] == endpoint[arm]
                   and (o not in pairs or any(b0 < a1 and a0 < b1 for a0, a1 in spans
                                              for b0, b1 in ((x.get("t", 0.0), y.get("t", 0.0)) for x, y in pairs[o])))]
        row: ServerMetricsRow = {"arm": arm, **figures,  # type: ignore[typeddict-item]  # the figures found
                                 "windows": len(ws), "window": [spans[0][0], spans[-1][1]],
                                 "attribution": "mixed" if sharing else "own"}
        if sharing:
            row["mixed_with"] = sharing
        out.append(row)
    return out


def own_metrics(rows: list[ServerMetricsRow]) -> dict[str, ServerMetricsRow]:
    """The rows whose counters are the arm's own, by arm (what engagement and rates may use)."""
    return {r["arm"]: r for r in rows if r.get("attribution") == "own"}
