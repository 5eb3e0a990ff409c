"""The arms a what-if serves on, from a run's summary: rate model, slots, batching, prefix cache, price.

Each figure is taken from where it is best known, and its source is said (:class:`~.whatif.ArmSpec`):

    rate model      summary ``rate_models[]`` (the context-aware model) > the flat model of the arm's
                    ``rates[]`` row (:func:`.rate_model.from_rates_row`: one prefill and one decode rate);
                    a cache arm whose every prompt hit its cache has no prefill rate of its own: it takes
                    the prefill of its twin without the cache (the arm that differs from it in the prefix
                    cache only), since a cache changes which tokens are prefilled, not what one costs
    concurrency     the model's ``batch`` slowdown (relative to one request alone: :func:`batch_points`)
                    with its ``slots`` (else the arm's discovered slots, else the largest concurrency
                    measured); without a measured slowdown, one request at a time, and where the slots are
                    known all the same (more than 1), ``parallel_slots``: the forecast serves them also in
                    parallel without slowdown and gives both
    prefix cache    on when the arm's knobs say so (``prefix_cache``, llama.cpp's ``cache_prompt``), else when
                    its calls read cached tokens (``engaged``), else off; kept by its engine's rule
                    (:func:`.whatif_cache.rule_of`: the knobs' ``engine``, ``simulator``)
    capacity        --cache-tokens > the arm's knobs ``kv_capacity_tokens`` > vLLM's ``num_gpu_blocks`` ×
                    ``block_size`` > ``context_length`` × slots (the KV the engine holds for its slots) >
                    :data:`~.prefix_cache.DEFAULT_CACHE_TOKENS`.  On llama.cpp (its slots keep their own
                    KV) the capacity is that of its host-memory prompt cache: 0 where its arguments say
                    ``--cache-ram 0``; else context_length × slots is its least token limit (n_ctx; it holds
                    more as far as ``--cache-ram``, 8 GiB by default, allows: give --cache-tokens)
    block size      --block-tokens > the arm's ``block_size`` > the simulator's ``cache_block`` (its discovered
                    settings) > 1 on llama.cpp (it compares prompts token by token) >
                    :data:`~.prefix_cache.DEFAULT_BLOCK_TOKENS`
    price           --gpus / --gpu-hour-usd > the arm's conditions ``gpus`` / ``gpu_hour_usd`` > 1 GPU, no price
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from ...errors import BadInput
from ...levers import registry
from ..base.knobs import differing
from ..rates.rate_model import from_rates_row, single_stream_tpot
from .cache import rule_of
from .forecast import ArmSpec, prefix_cache_on, slowdown_curve
from .prefix_cache import DEFAULT_BLOCK_TOKENS, DEFAULT_CACHE_TOKENS

if TYPE_CHECKING:
    from ...json_types import JSONValue
    from ...schema.rate_rows import BatchSlowdown, RateModelRow, RateRow
    from ...schema.summary import Summary
    from ...schema.whatif_rows import ServedRateModel


def _num(x: JSONValue) -> float | None:
    """float(x) where it is a number above 0 (a number, or text that holds one), else None."""
    if not isinstance(x, (str, int, float)):  # null, a list, an object: float() refuses them
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def _int(x: JSONValue) -> int:
    """int(x) of a value :func:`_num` took for a number."""
    if not isinstance(x, (str, int, float)):
        raise TypeError(f"not a number: {x!r}")
    return int(x)


#: The lever that serves seen prompts from a cache (the prefix cache: :func:`leverbench.levers.registry.prompt_cache`).
_CACHE = registry.prompt_cache()
#: The knobs in which an arm and its twin without a prefix cache may differ: the lever's names, and its per-call
#: request fields as knobs (llama.cpp's ``request.cache_prompt``).
_PREFIX_CACHE_KNOBS = {*_CACHE.names(), *(f"request.{f}" for f in _CACHE.request_fields)} if _CACHE else set()


def _twin_prefill(summary: Summary, arm: str) -> tuple[RateRow, str] | None:
    """(the ``rates[]`` row with the prefill of the arm's twin without a prefix cache, the twin's name)."""
    knobs = {a["name"]: dict(a.get("knobs") or a.get("conditions") or {}) for a in summary.get("arms") or []}
    rows = {r.get("arm"): r for r in summary.get("rates") or []}
    for name, k in knobs.items():
        row = rows.get(name)
        if name != arm and row is not None and row.get("prefill_tps") and \
                set(differing(k, knobs.get(arm, {}))) <= _PREFIX_CACHE_KNOBS \
                and not prefix_cache_on(k):
            return row, name
    return None


def rate_model_of(summary: Summary, arm: str) -> tuple[RateModelRow | None, str]:
    """(the arm's rate model, where it came from): ``rate_models[]``, else the flat model of ``rates[]``."""
    for m in summary.get("rate_models") or []:
        if m.get("arm") == arm and m.get("prefill") and m.get("decode"):
            return m.copy(), "rate_models (context-aware)"
    row = next((r for r in summary.get("rates") or [] if r.get("arm") == arm), None)
    model = from_rates_row(row) if row else None
    if model is None and row and row.get("decode_tps") and not row.get("prefill_tps"):
        twin = _twin_prefill(summary, arm)
        if twin is not None:
            model = from_rates_row({**row, "prefill_tps": twin[0]["prefill_tps"],
                                    "prefill_a_s": twin[0].get("prefill_a_s"),
                                    "prefill_source": f"arm {twin[1]!r}'s (its twin without the cache)"})
            return model, (f"rates (flat; prefill from arm {twin[1]!r}, its twin without the cache: every prompt "
                           "of this arm's own hit its cache)")
    return model, ("rates (flat: one prefill and one decode rate)" if model else
                   (f"no rates: {row.get('refused')}" if row and row.get("refused") else "no measured rates"))


def batch_points(model: RateModelRow) -> tuple[BatchSlowdown | None, str | None]:
    """(the rate model's ``batch`` with its slowdown relative to one request alone, a note when it had to be
    re-normalised).  A summary written before issue 22 took it against the sweep's lowest concurrency c0
    (``reference_concurrency`` c0 > 1): then slowdown(c) = TPOT(c) / tpot_1, tpot_1 the model's per-token time
    d0 + d1·L at the middle L of its decode's fitted contexts (the sweep's own context was not recorded);
    without its ``tpot_s``, it is served as it is, and the note says so."""
    b = model.get("batch")
    if not b or not b.get("concurrency"):
        return None, None
    ref = b.get("reference_concurrency")
    if ref is None or float(ref) <= 1:
        return b.copy(), None
    decode, tpot = model.get("decode"), b.get("tpot_s")
    if tpot and len(tpot) == len(b["concurrency"]) and decode is not None and \
            decode.get("d0_s_per_token") is not None:
        lo, hi = decode.get("range_context") or (0, 0)
        t1 = single_stream_tpot(model, (lo + hi) / 2.0, 0.0)
        if t1 > 0:
            renormalised: BatchSlowdown = {**b, "slowdown": [t / t1 for t in tpot],
                                           "single_stream_tpot_s": [t1] * len(tpot), "reference_concurrency": 1}
            return (renormalised,
                    f"its batching slowdown (an older summary's) was relative to concurrency {ref:g}: taken against "
                    f"one request alone (single stream) instead, the rate model's {t1 * 1000:.3g} ms a token"
                    + (f" at a context of {(lo + hi) / 2:,.0f}" if decode.get("d1_s_per_token_per_ctx") else ""))
    return b.copy(), (f"its batching slowdown (an older summary's) is relative to concurrency {ref:g}, not to a single "
                     "stream, and cannot be re-normalised (no TPOT beside it): below concurrency "
                     f"{ref:g} the slowdown is unknown; analyze the run's ledger again")


def capacity_of(knobs: Mapping[str, JSONValue], slots: float,
                engine_args: Sequence[JSONValue] = ()) -> tuple[float, str]:
    """(cache capacity in tokens, its source) from an arm's knobs, its slots (a whole number, which the knobs may
    give as 4.0) and its engine's arguments (see the module docstring)."""
    llama = rule_of(knobs)[0] == "slots"
    args = [str(a) for a in engine_args]
    if llama and "--cache-ram" in args[:-1] and args[args.index("--cache-ram") + 1] == "0":
        return 0.0, "--cache-ram 0: llama.cpp keeps no prompt in host memory, only its slots their own"
    if (kv := _num(knobs.get("kv_capacity_tokens"))) and not llama:
        return kv, "the arm's KV capacity (discovered)"
    if (blocks := _num(knobs.get("num_gpu_blocks"))) and (size := _num(knobs.get("block_size"))) and not llama:
        return blocks * size, "the arm's num_gpu_blocks × block_size (discovered)"
    if context := _num(knobs.get("context_length")):
        if llama:
            return (context * max(slots, 1),
                    f"llama.cpp's host-memory prompt cache at its least, n_ctx = the context length × {slots} "
                    "slot(s) (it holds more as far as --cache-ram, 8 GiB by default, allows: give --cache-tokens)")
        return context * max(slots, 1), f"the arm's context length × {slots} slot(s)"
    return float(DEFAULT_CACHE_TOKENS), (f"the default {DEFAULT_CACHE_TOKENS:,} tokens (an 8B model's KV on an 80 GB "
                                         "GPU); give --cache-tokens")


def block_of(knobs: Mapping[str, JSONValue], discovered: Mapping[str, JSONValue] | None = None) -> tuple[int, str]:
    """(cache block in tokens, its source) from an arm's knobs and discovered facts (see the module docstring)."""
    if _num(knobs.get("block_size")):
        return _int(knobs["block_size"]), "the arm's block_size"
    props = (discovered or {}).get("props") if knobs.get("simulator") else None
    sim = props.get("sim") if isinstance(props, dict) else None
    if isinstance(sim, dict) and _num(sim.get("cache_block")):
        return _int(sim["cache_block"]), "the simulator's cache_block (discovered)"
    if "llama" in str(knobs.get("engine", "")).lower():
        return 1, "llama.cpp compares prompts token by token"
    return DEFAULT_BLOCK_TOKENS, f"the default {DEFAULT_BLOCK_TOKENS} tokens per block (vLLM's on a GPU)"


def arm_specs(summary: Summary, arms: Sequence[str] | None = None, *, cache_tokens: float | None = None,
              block_tokens: int | None = None, gpus: float | None = None,
              gpu_hour_usd: float | None = None) -> tuple[list[ArmSpec], list[str]]:
    """The arms of a run summary as the simulation serves them, and notes on the arms left out."""
    by_name = {a["name"]: a for a in summary.get("arms") or []}
    names = list(arms) if arms else list(by_name)
    unknown = [a for a in names if a not in by_name]
    if unknown:
        raise BadInput(f"--arms: no arm {', '.join(map(repr, unknown))} in the run (arms: {', '.join(by_name)})")
    engaged = {e.get("arm"): e for e in summary.get("engaged") or []}
    out, notes = [], []
    for name in names:
        a = by_name[name]
        knobs = dict(a.get("knobs") or a.get("conditions") or {})
        model, source = rate_model_of(summary, name)
        if model is None:
            notes.append(f"arm {name!r} left out: {source}")
            continue
        served: ServedRateModel = {**model, "source": source}
        spec_notes = [f"rate model: {source}"]
        batch, batch_note = batch_points(served)
        if batch_note:
            spec_notes.append(batch_note)
            served["batch"] = batch
        knob_slots = knobs.get("slots")  # a number (a whole one, maybe 4.0), as the ledger's reader checks it
        slots_known = served.get("slots") or (knob_slots if isinstance(knob_slots, (int, float)) else None)
        parallel = None
        if batch:
            slots = int(slots_known or max(batch["concurrency"]))
            spec_notes.append(f"{slots} slot(s), batching slowdown measured at concurrency "
                              f"{', '.join(str(c) for c in batch['concurrency'])}")
        else:
            slots = 1
            if slots_known and int(slots_known) > 1:
                parallel = int(slots_known)
        on = prefix_cache_on(knobs)
        if on is None:
            on = bool(_CACHE and registry.used_in(engaged.get(name) or {}, _CACHE.name))
            spec_notes.append(f"prefix cache {'on' if on else 'off'}: from its calls' cached tokens "
                              "(the arm's knobs do not say)")
        rule, rule_src = rule_of(knobs)
        discovered = a.get("discovered")
        found = discovered if isinstance(discovered, dict) else {}
        engine_args = found.get("engine_args")
        args = engine_args if isinstance(engine_args, list) else []
        cap, cap_src = (float(cache_tokens), "--cache-tokens") if cache_tokens is not None else \
            capacity_of(knobs, slots_known or 1, args)
        blk, blk_src = (int(block_tokens), "--block-tokens") if block_tokens is not None else block_of(knobs, found)
        cond = a.get("conditions") or {}
        g = gpus if gpus is not None else _num(cond.get("gpus")) or 1.0
        usd = gpu_hour_usd if gpu_hour_usd is not None else _num(cond.get("gpu_hour_usd"))
        decode = served.get("decode")
        if decode and (acceptance := decode.get("acceptance")) is not None:
            spec_notes.append(f"drafter acceptance {acceptance:.0%} (inside its decode rate)")
        out.append(ArmSpec(name, served, slots=slots, slowdown=slowdown_curve(batch), cache=on, capacity_tokens=cap,
                           block_tokens=blk, cache_source=f"capacity: {cap_src}; block: {blk_src}; {rule_src}",
                           cache_rule=rule, parallel_slots=parallel, knobs=knobs, gpus=g, gpu_hour_usd=usd,
                           notes=spec_notes))
    if not out:
        raise BadInput("no arm of the run has measured prefill and decode rates to simulate with (summary "
                       "rate_models[] and rates[])" + (f": {'; '.join(notes)}" if notes else "")
                       + "; give --rates a run whose arms served turns or probes that completed")
    return out, notes
