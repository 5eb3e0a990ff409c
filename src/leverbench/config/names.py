"""Text in the experiment file that becomes a file name, a path, a URL or JSON on the wire, checked when it is
loaded: names without control characters and of a bounded length (the experiment's also fit a file name),
endpoint URLs that parse as http(s) with a host and a valid port, values of ``request`` and ``conditions``
that JSON can carry (finite numbers, bounded nesting).  The limits: :mod:`.limits`."""

from __future__ import annotations

import math
import unicodedata
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator

from ..redact import redact_url
from .limits import MAX_JSON_DEPTH, MAX_LABEL_CHARS, MAX_NAME_BYTES, MAX_NAME_CHARS, MAX_PATH_CHARS, shown


def control_char(s: str) -> str | None:
    """The first control character in *s* (a C0/C1 control, DEL, a line or paragraph separator), as
    ``U+XXXX``; None when there is none."""
    for c in s:
        if unicodedata.category(c) in ("Cc", "Zl", "Zp"):
            return f"U+{ord(c):04X}"
    return None


def _label(v: str) -> str:
    bad = control_char(v)
    if bad:
        raise ValueError(f"may not hold control characters ({bad} in {shown(v)})")
    if len(v) > MAX_LABEL_CHARS:
        raise ValueError(f"must be at most {MAX_LABEL_CHARS} characters, got {len(v)}")
    return v


def _run_name(v: str) -> str:
    where = "names the run directory (runs/NAME-YYYYmmdd-HHMMSS)"
    bad = control_char(v)
    if bad:
        raise ValueError(f"{where}: no control characters ({bad} in {shown(v)})")
    if len(v) > MAX_NAME_CHARS or len(v.encode("utf-8")) > MAX_NAME_BYTES:
        raise ValueError(f"{where}: at most {MAX_NAME_CHARS} characters ({MAX_NAME_BYTES} bytes of UTF-8), got "
                         f"{len(v)} ({len(v.encode('utf-8'))} bytes)")
    if "/" in v or "\\" in v or v.strip() in ("", ".", ".."):
        raise ValueError(f"{where}: no '/' or '\\', not empty, '.' or '..', got {shown(v)}")
    return v


def _path(v: str) -> str:
    bad = control_char(v)
    if bad:
        raise ValueError(f"a file path may not hold control characters ({bad} in {shown(v)})")
    if len(v) > MAX_PATH_CHARS:
        raise ValueError(f"a file path must be at most {MAX_PATH_CHARS} characters, got {len(v)}")
    return v


def _arg(v: str) -> str:
    if "\x00" in v:  # a process's argument cannot hold one
        raise ValueError(f"an engine argument may not hold a NUL character (U+0000 in {shown(v)})")
    return v


def url_problem(v: str) -> str | None:
    """What is wrong with *v* as an endpoint URL (None: nothing): http or https, a host, a port from 1 to
    65535 if one is given, no white space or control characters (which would end up in a request's headers)."""
    # as written, unless it may carry a secret (userinfo, query, fragment: redact_url hides them, or all of a URL
    # that does not parse)
    show = shown(v if not any(c in v for c in "@?#") else redact_url(v))
    example = " (e.g. http://127.0.0.1:8080/v1)"
    bad = control_char(v) or next((f"U+{ord(c):04X}" for c in v if c.isspace()), None)
    if bad:
        return f"must be a URL without white space or control characters ({bad} in {show})"
    try:
        parts = urlsplit(v)
        port = parts.port
    except ValueError as exc:  # "Port out of range 0-65535", "Port could not be cast", "Invalid IPv6 URL"
        return f"is not a valid URL ({exc}): {show}{example}"
    if parts.scheme.lower() not in ("http", "https"):
        return f"must be an http:// or https:// URL, got {show}{example}"
    if not parts.hostname:
        return f"must name a host, got {show}{example}"
    try:  # what the client will do with it: a label over 63 characters, or a name over 253, cannot be looked up
        encoded = parts.hostname.encode("idna")
    except UnicodeError as exc:
        return f"names a host that is no valid DNS name ({exc}), got {show}"
    if len(encoded) > 253:
        return f"names a host of {len(encoded)} characters (a DNS name has at most 253), got {show}"
    if port == 0:
        return f"must have a port from 1 to 65535, got 0 in {show}"
    return None


def _url(v: str) -> str:
    problem = url_problem(v)
    if problem:
        raise ValueError(problem)
    return v


def json_problem(v: Any, where: str, depth: int = 0, *, sent: bool = False) -> str | None:
    """What keeps *v* (the value at *where*: ``request``, ``conditions``) from being sent or recorded as JSON: a
    number that is not finite, nesting past :data:`~.limits.MAX_JSON_DEPTH`, and if it is *sent* as it is, a TOML
    date or time (None: nothing)."""
    if depth > MAX_JSON_DEPTH:
        return f"{where} is nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(v, float) and not math.isfinite(v):
        return f"{where} must be a finite number (JSON has no {shown(v)})"
    if isinstance(v, dict):
        return next((p for k, x in v.items() if (p := json_problem(x, f"{where}.{k}", depth + 1, sent=sent))), None)
    if isinstance(v, list):
        return next((p for i, x in enumerate(v) if (p := json_problem(x, f"{where}[{i}]", depth + 1, sent=sent))),
                    None)
    if sent and not (v is None or isinstance(v, (str, int, float))):
        return f"{where} is a {type(v).__name__}, which JSON cannot carry (quote it: a string)"
    return None


def json_depth(v: Any) -> int:
    """How deep *v* (parsed JSON) nests, counted without recursion (a hostile file may nest 10^5 deep)."""
    deepest, stack = 0, [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((y, d + 1) for y in (x.values() if isinstance(x, dict) else x))
    return deepest


Label = Annotated[str, AfterValidator(_label)]
Arg = Annotated[str, AfterValidator(_arg)]
RunName = Annotated[str, AfterValidator(_run_name)]
FilePath = Annotated[str, AfterValidator(_path)]
Url = Annotated[str, AfterValidator(_url)]
