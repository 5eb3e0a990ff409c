"""Credentials: where an arm's key may be sent, and out of URLs before anything is written or printed.

The key (``api_key_env``) goes only to the arm's own origin (:func:`same_origin`
with its ``base_url``), and to a ``metrics_url`` elsewhere only when the arm
says ``metrics_send_key = true``.

An endpoint URL may carry a secret in its userinfo (``http://user:pass@host/v1``)
or its query (``?api_key=...``, ``?key=``, ``token``, ``sig``...).  The rule, one
function for every place a URL is written (the ledger's header, error
messages, the summary and reports): the userinfo becomes ``***``; every query
value becomes ``***`` except those named in :data:`SAFE_QUERY_NAMES` (names
alone are kept, so the reader still sees what was passed); a fragment becomes
``***``.  All query values rather than those whose names look secret: a
guessed list of secret-looking names would miss the next gateway's spelling.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

HIDDEN = "***"
_DEFAULT_PORTS = {"http": 80, "https": 443}
SAFE_QUERY_NAMES = frozenset({"api-version"})  # Azure OpenAI's version selector: no secret, worth keeping
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>,.;:!?)\]]")  # not a trailing comma or stop
_QUERY_ITEM = re.compile(r"(?<=[?&])[^=&\s'\"#<>/?]+=[^&\s'\"#<>]*")


def same_origin(url: str, base_url: str) -> bool:
    """Whether *url* is on *base_url*'s origin: the same scheme, host and port (a missing port being
    the scheme's default).  A malformed URL, or one without a host, shares no origin."""

    def origin(u: str) -> tuple[str, str, int | None] | None:
        try:
            p = urlsplit(u)
            scheme = p.scheme.lower()
            return (scheme, p.hostname.lower(), p.port or _DEFAULT_PORTS.get(scheme)) if p.hostname else None
        except ValueError:  # a bad port or IPv6 literal
            return None

    a = origin(url)
    return a is not None and a == origin(base_url)


def redact_url(url: str) -> str:
    """*url* with its userinfo, query values (but :data:`SAFE_QUERY_NAMES`') and fragment replaced by ``***``.

    ``http://u:p@h:8000/v1?api_key=k&api-version=1#t`` → ``http://***@h:8000/v1?api_key=***&api-version=1#***``.
    A string that does not parse as a URL is hidden whole."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return HIDDEN
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{HIDDEN}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(_redact_query_item(item) for item in parts.query.split("&")) if parts.query else ""
    fragment = HIDDEN if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _redact_query_item(item: str) -> str:
    name, eq, value = item.partition("=")
    if name.lower() in SAFE_QUERY_NAMES or value.rstrip(",.;:!?)]") == HIDDEN:  # kept, or redacted already
        return item
    return f"{name}={HIDDEN}" if eq else HIDDEN


def redact_text(text: str) -> str:
    """*text* (an error message, a server's answer) with every URL in it passed through :func:`redact_url`
    and every ``?name=value`` / ``&name=value`` outside a URL (a path echoed back) given the same rule."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    return _QUERY_ITEM.sub(lambda m: _redact_query_item(m.group(0)), text)


def redact_tree(obj: Any) -> Any:
    """*obj* (dicts, lists, strings) with :func:`redact_text` applied to every string in it."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_tree(v) for v in obj]
    return obj
