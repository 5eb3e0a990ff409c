"""The ledger's record kinds and schema version.

``ledger.jsonl`` holds one JSON object per line.  The first line is the
``run`` header; every later line is one of the kinds below.  A record is never
rewritten: a resumed run appends a ``resume`` record and continues.

Schema ``leverbench.ledger/1``:

- ``run``: schema, tool_version, run_id, started_at (ISO 8601 UTC), host{...},
  experiment_file, config (the validated experiment, as JSON), arms{name:
  {role, conditions (declared), discovered{...}}}.
- ``call`` / ``probe`` / ``sentinel``: one model call each.  Keys: kind, arm,
  case, repeat, step, t_send (epoch s at which the call started), connect_s
  (seconds spent opening a new connection: DNS, TCP, TLS; 0.0 when an arm's
  kept-alive connection was reused; null when no connection was made),
  ttft_s, latency_s (→ the stream's ``[DONE]``, or its end) and chunk_t (seconds at which each streamed
  chunk with content arrived), all three counted from when the connection was
  ready, i.e. from t_send + connect_s, so that connect time never hides in
  them (a call's full time is connect_s + latency_s); stale_connection (true
  when a kept-alive connection turned out closed by the server and the call
  went out on a new one: its connect_s counts from the call's start),
  chunk_chars, status
  (HTTP), error (null or {class, message}),
  prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens,
  token_source ("usage" or "none"), content_chars, reasoning_chars,
  finish_reason, timings (llama.cpp's, as sent), request (JSON body sent,
  less messages: model, max_tokens, temperature, the arm's extra fields, ...),
  input_sha256, output_sha256, input_chars; and when the
  experiment says ``store_text``: input_messages, output_text, chunk_text.
  Probes also carry ``probe_tokens`` (the forced output length).
- ``load``: one call of a load stage: the call keys plus stage, mode, sweep,
  the stage's parameters (concurrency, rate, arrival, speed, ...;
  closed/open stages: prefix_sharing, the fraction of the prompt's tokens all
  the stage's requests share — the rest is made unique per request),
  scheduled_t (epoch s at which the schedule meant to send it; the client's
  lag is t_send − scheduled_t), warmup, load_run (which execution of the stage:
  a resumed run repeats load stages and analysis keeps the latest), repeat
  (request index), step, loop_lag_s; trace calls add target_input_tokens,
  target_output_tokens, session, turn_id; a trace stage's first call carries
  trace_import (rows used / skipped and why) and token_check (/tokenize).
- ``turn``: one per finished turn (arm, case, repeat): turn_s (the turn's
  full wall clock: first call's start → last token, connect times included),
  calls, failed_calls, output_tokens, prompt_tokens, error.  A turn, probe or
  sentinel whose record has an error is run again by a resumed run; the
  failed record stays, superseded (the analysis counts a unit's first
  successful attempt, else its latest).
- ``metrics``: a Prometheus scrape of an arm's endpoint: arm, when
  ("before" / "after"), samples{name: value}; a NaN or infinite sample (legal
  in the exposition format) is the string "NaN", "+Inf" or "-Inf".
- ``stage_end``: one per load stage finished on an arm: stage, arm, load_run,
  calls (records the stage wrote).  A resumed run skips the (stage, arm)
  pairs that have one and runs the others again (a stage is one measurement:
  one cut short is repeated whole; the analysis keeps the latest execution).
- ``warmup``: a short call to each arm before the work starts (a fresh
  server's first call is slow); kept, never analysed.
- ``resume``: at, tool_version, completed_units (units with a successful
  record, not run again), failed_units_rerun (units whose every record failed,
  run again), repeats.

JSON has no NaN or infinity: wherever a record holds one (a server's sample
or ``timings``), the writer stores the string "NaN", "+Inf" or "-Inf"
(:func:`json_number`; ``float()`` reads each back).
"""

from __future__ import annotations

import math
from typing import Any

LEDGER_SCHEMA = "leverbench.ledger/1"
LEDGER_SCHEMA_NAME, LEDGER_SCHEMA_VERSION = LEDGER_SCHEMA.rsplit("/", 1)
SUMMARY_SCHEMA = "leverbench.summary/1"

CALL_KINDS = ("call", "probe", "sentinel", "load")
KINDS = ("run", "turn", "metrics", "resume", "warmup", "stage_end", *CALL_KINDS)

# The fields of call and turn records that analysis reads as columns (the reader's ``Columns``):
# labels (text), numbers (float64, NaN where the record lacks the field or has null), flags (true or
# not), and for calls the numbers inside llama.cpp's ``timings`` object.
LABELS = ("arm", "case", "turn_id")
CALL_NUMBERS = ("step", "latency_s", "ttft_s", "t_first_answer_s", "prompt_tokens", "completion_tokens",
                "cached_tokens", "reasoning_tokens", "content_chars", "reasoning_chars", "reasoning_chunks",
                "answer_chunks")
CALL_FLAGS = ("retried", "empty_answer")
CALL_TIMINGS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n", "draft_n", "draft_n_accepted")
TURN_NUMBERS = ("repeat", "turn_s", "output_tokens", "prompt_tokens", "reasoning_tokens", "tool_s", "retried_s")
TURN_FLAGS = ("step_limit",)


def json_number(v: float) -> float | str:
    """*v* as the ledger stores it: itself when finite, else "NaN", "+Inf" or "-Inf" (Prometheus' spelling)."""
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")


def json_safe(obj: Any) -> Any:
    """*obj* with every non-finite float (in dicts, lists and tuples) replaced by :func:`json_number`'s string."""
    if isinstance(obj, float):
        return json_number(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
