"""``report.html`` and the side-by-side replay page: each one self-contained file.

Both pages open offline: styles, the one script and every plot are inline, and
a Content-Security-Policy meta tag forbids the page any fetch at all
(``default-src 'none'``); the only script allowed to run is the page's own,
named by its SHA-256 hash, so even markup that slipped past escaping could not
execute.  Plots are inline SVG drawn here from ``summary.json`` numbers; the
tables are the same :mod:`leverbench.report.tables` the terminal and Markdown
reports use, so the three never disagree.

Untrusted text (model output, prompts, documents, anything from the ledger)
is text: templates autoescape, SVG is built with :class:`markupsafe.Markup`
formatting (which escapes every argument), the replay's data travels as JSON
in a ``<script type="application/json">`` block with ``<``, ``>``, ``&`` and
``'`` written as ``\\u003c`` etc., and the replay script inserts it with
``textContent`` only.

Public API: :func:`render_html`, :func:`render_replay`, :func:`replay_data`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from ..errors import BadInput
from ..ledger.reader import Ledger
from .jsonio import finite
from .tables import Table, all_tables

__all__ = ["render_html", "render_replay", "replay_data", "script_json", "CSP"]

_TEMPLATES = Path(__file__).with_name("templates")
_env = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                   trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)

_SCRIPT = (_TEMPLATES / "replay.js").read_text(encoding="utf-8")
_STYLE = (_TEMPLATES / "report.css").read_text(encoding="utf-8")
assert "</script" not in _SCRIPT.lower() and "</style" not in _STYLE.lower()
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")

#: The page's policy: nothing may be fetched; only the page's own script runs.
CSP = (f"default-src 'none'; script-src 'sha256-{_SCRIPT_HASH}'; style-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'")

#: Calls drawn per regression scatter at most (an even sample of the cell's calls beyond it).
MAX_SCATTER_POINTS = 400
#: Replay events embedded in report.html at most (a chunk is one event); past it, fewer repeats are embedded.
MAX_REPORT_EVENTS = 200_000

PHASE_COLORS = {"prefill": "#4e79a7", "decode": "#f28e2b", "other": "#bab0ac"}
ARM_COLORS = ["#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f",
              "#79706e"]


# ---------------------------------------------------------------- JSON for a script block


def script_json(obj: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&`` or ``'`` appears
    literally (each becomes a ``\\u00XX`` escape, which JSON.parse reads back unchanged), so no text can
    close the block or open a comment; non-ASCII is escaped too, so the block is plain ASCII."""
    text = json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    text = (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("'", "\\u0027"))
    return Markup(text)


# ---------------------------------------------------------------- small numeric helpers


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (lo is usually 0)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v < hi + step * 0.999:
        ticks.append(round(v, 10))
        v += step
    return ticks


def _fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v - round(v)) < 1e-9:
        return f"{v:.0f}"
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _arm_colors(names: Iterable[str]) -> dict[str, str]:
    return {a: ARM_COLORS[i % len(ARM_COLORS)] for i, a in enumerate(names)}


M = Markup  # Markup("...{}...").format(x) escapes x


# ---------------------------------------------------------------- plots (inline SVG)


def svg_stacked_bars(groups: list[tuple[str, list[dict[str, Any]]]], *, label: str, unit: str = "s") -> Markup:
    """Horizontal stacked bars: per group (a case, or the scenario), one bar per arm.

    Each row: {"arm", "segments": [(phase, seconds)], "total": seconds shown at the bar's end,
    "note": text shown instead of a bar (a refused projection)}.
    """
    rows = [r for _, rs in groups for r in rs]
    vmax = max([sum(v for _, v in r.get("segments") or [] if v) for r in rows] +
               [r.get("total") or 0 for r in rows] + [1e-9])
    ticks = _nice_ticks(0, vmax)
    vmax = ticks[-1]
    left, width, right, rh, gap, top = 170, 520, 70, 22, 6, 24
    height = top + sum(18 + len(rs) * (rh + gap) for _, rs in groups) + 30
    W = left + width + right
    x = lambda v: left + width * v / vmax  # noqa: E731
    parts = [M('<svg class="plot" viewBox="0 0 {} {}" width="{}" role="img" aria-label="{}">').format(
        W, height, W, label)]
    parts.append(M('<title>{}</title>').format(label))
    # legend: the phases that appear
    lx = left
    shown = {p for r in rows for p, v in r.get("segments") or [] if v}
    for phase, color in PHASE_COLORS.items():
        if phase not in shown:
            continue
        parts.append(M('<rect x="{}" y="6" width="12" height="12" fill="{}"/>'
                       '<text x="{}" y="16" class="lg">{}</text>').format(lx, color, lx + 16, phase))
        lx += 90
    y = top
    grid_top = y
    for group, rs in groups:
        parts.append(M('<text x="4" y="{}" class="grp">{}</text>').format(y + 13, group))
        y += 18
        for r in rs:
            parts.append(M('<text x="{}" y="{}" class="lbl" text-anchor="end">{}</text>').format(
                left - 6, y + rh * 0.7, _clip(r["arm"], 26)))
            if r.get("note"):
                parts.append(M('<text x="{}" y="{}" class="note">{}</text>').format(left + 4, y + rh * 0.7,
                                                                                    _clip(r["note"], 90)))
                y += rh + gap
                continue
            cx = left
            tot = sum(v for _, v in r["segments"] if v)
            for phase, v in r["segments"]:
                if not v or v <= 0:
                    continue
                w = width * v / vmax
                share = v / tot if tot else 0
                parts.append(M('<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}">'
                               '<title>{} · {}: {:.2f} {} ({:.0%})</title></rect>').format(
                    cx, y, w, rh, PHASE_COLORS.get(phase, "#999"), r["arm"], phase, v, unit, share))
                if w > 44:
                    parts.append(M('<text x="{:.1f}" y="{}" class="in" text-anchor="middle">{:.0%}</text>').format(
                        cx + w / 2, y + rh * 0.7, share))
                cx += w
            total = r.get("total")
            if total is not None:
                parts.append(M('<text x="{:.1f}" y="{}" class="val">{:.2f} {}</text>').format(
                    max(cx, x(total)) + 4, y + rh * 0.7, total, unit))
            y += rh + gap
    # axis and grid, drawn under the bars
    grid = [M('<line x1="{}" y1="{}" x2="{}" y2="{}" class="ax"/>').format(left, y, left + width, y)]
    for t in ticks:
        grid.append(M('<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" class="grid"/>'
                      '<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>').format(
            x(t), grid_top, x(t), y + 4, x(t), y + 16, _fmt_tick(t)))
    parts[2:2] = grid
    parts.append(M('<text x="{}" y="{}" class="axl" text-anchor="middle">{}</text>').format(
        left + width / 2, y + 28, f"seconds per turn ({unit})" if unit == "s" else unit))
    parts.append(M("</svg>"))
    return Markup("").join(parts)


def svg_hbars(items: list[tuple[str, float | None, str]], *, label: str, axis: str) -> Markup:
    """One plain horizontal bar per item: (name, value, value label)."""
    vals = [v for _, v, _ in items if v is not None]
    ticks = _nice_ticks(0, max(vals + [1e-9]))
    vmax = ticks[-1]
    left, width, right, rh, gap, top = 170, 520, 110, 22, 6, 8
    height = top + len(items) * (rh + gap) + 36
    parts = [M('<svg class="plot" viewBox="0 0 {} {}" width="{}" role="img" aria-label="{}"><title>{}</title>').format(
        left + width + right, height, left + width + right, label, label)]
    y = top
    colors = _arm_colors(n for n, _, _ in items)
    for name, v, txt in items:
        parts.append(M('<text x="{}" y="{}" class="lbl" text-anchor="end">{}</text>').format(
            left - 6, y + rh * 0.7, _clip(name, 26)))
        w = 0.0 if v is None else width * max(v, 0) / vmax
        parts.append(M('<rect x="{}" y="{}" width="{:.1f}" height="{}" fill="{}"><title>{}: {}</title></rect>'
                       '<text x="{:.1f}" y="{}" class="val">{}</text>').format(
            left, y, w, rh, colors[name], name, txt, left + w + 4, y + rh * 0.7, txt))
        y += rh + gap
    grid = [M('<line x1="{}" y1="{}" x2="{}" y2="{}" class="ax"/>').format(left, y, left + width, y)]
    for t in ticks:
        xx = left + width * t / vmax
        grid.append(M('<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" class="grid"/>'
                      '<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>').format(
            xx, top, xx, y + 4, xx, y + 16, _fmt_tick(t)))
    parts[1:1] = grid  # under the bars
    parts.append(M('<text x="{}" y="{}" class="axl" text-anchor="middle">{}</text></svg>').format(
        left + width / 2, y + 30, axis))
    return Markup("").join(parts)


def svg_scatter(d: dict[str, Any], color: str, xmax: float, ymax: float) -> Markup:
    """One cell's calls: latency against output tokens, with the fitted line when the fit was not refused.

    The fit is drawn solid over the measured output range and dashed back to 0 output tokens, where it
    meets the intercept (prefill + overhead).
    """
    W, H, l, r, t, b = 280, 212, 44, 12, 46, 34
    pw, ph = W - l - r, H - t - b
    xt, yt = _nice_ticks(0, xmax, 4), _nice_ticks(0, ymax, 4)
    X = lambda v: l + pw * v / xt[-1]  # noqa: E731
    Y = lambda v: t + ph - ph * v / yt[-1]  # noqa: E731
    title = f"{d['arm']} · {d['case']}"
    if d.get("refused"):
        sub = f"no fit: {d['refused']}"
    else:
        sub = f"{d['decode_tps']:.1f} tok/s · intercept {d['intercept_s']:.2f} s · R² {d['r2']:.3f}"
    if "uncached" in str(d.get("method") or "") and not d.get("refused"):
        sub2 = "fit also on uncached input; line at its median"
    elif d.get("mixed_prefill"):
        sub2 = "mixed prefill work: the slope may be biased"
    else:
        sub2 = ""
    xs_all = [(xv, yv) for xv, yv in zip(d.get("x") or [], d.get("y") or [])
              if _num(xv) is not None and _num(yv) is not None]
    pts = xs_all
    if len(xs_all) > MAX_SCATTER_POINTS:  # an even sample keeps the page small
        step = len(xs_all) / MAX_SCATTER_POINTS
        pts = [xs_all[int(i * step)] for i in range(MAX_SCATTER_POINTS)]
        sub2 = (sub2 + " · " if sub2 else "") + f"{len(pts)} of {len(xs_all)} calls drawn"
    parts = [M('<svg class="scatter" viewBox="0 0 {} {}" width="{}" role="img" aria-label="{}">'
               '<title>{} — {}</title>').format(W, H, W, title, title, sub),
             M('<text x="{}" y="12" class="st">{}</text><text x="{}" y="24" class="ss">{}</text>'
               '<text x="{}" y="35" class="ss">{}</text>').format(
                 4, _clip(title, 40), 4, _clip(sub, 52), 4, _clip(sub2, 52))]
    for v in xt:
        parts.append(M('<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" class="grid"/>'
                       '<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>').format(
            X(v), t, X(v), t + ph, X(v), t + ph + 12, _fmt_tick(v)))
    for v in yt:
        parts.append(M('<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" class="grid"/>'
                       '<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{}</text>').format(
            l, Y(v), l + pw, Y(v), l - 3, Y(v) + 3, _fmt_tick(v)))
    parts.append(M('<rect x="{}" y="{}" width="{}" height="{}" class="frame"/>').format(l, t, pw, ph))
    if not d.get("refused") and _num(d.get("decode_tps")) and _num(d.get("intercept_s")) is not None:
        a, bslope = d["intercept_s"], 1.0 / d["decode_tps"]
        x0, x1 = d.get("output_min") or 0, d.get("output_max") or xmax
        clip = lambda xv: min(max(a + bslope * xv, 0), yt[-1])  # noqa: E731
        parts.append(M('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" class="fit dash" stroke="{}"/>'
                       '<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" class="fit" stroke="{}"/>').format(
            X(0), Y(clip(0)), X(x0), Y(clip(x0)), color, X(x0), Y(clip(x0)), X(x1), Y(clip(x1)), color))
    for xv, yv in pts:
        parts.append(M('<circle cx="{:.1f}" cy="{:.1f}" r="3.2" fill="{}"><title>{} tokens, {:.2f} s</title>'
                       '</circle>').format(X(xv), Y(yv), color, _fmt_tick(xv), yv))
    parts.append(M('<text x="{}" y="{}" class="axl" text-anchor="middle">output tokens</text>'
                   '<text x="10" y="{}" class="axl" text-anchor="middle" transform="rotate(-90 10 {})">latency s</text>'
                   '</svg>').format(l + pw / 2, H - 4, t + ph / 2, t + ph / 2))
    return Markup("").join(parts)


def _load_x(st: dict[str, Any]) -> str:
    if st.get("concurrency") is not None:
        return f"c={st['concurrency']}"
    if st.get("rate") is not None:
        return f"{st['rate']}/s"
    return str(st.get("stage", ""))


def svg_load(load: list[dict[str, Any]], arms: list[str]) -> Markup:
    """Throughput (x) against latency (y, p50 solid, p99 dashed), one line per arm through its load stages."""
    pts = [s for s in load if _num(s.get("throughput_tps")) is not None]
    W, H, l, r, t, b = 760, 340, 60, 140, 14, 40
    pw, ph = W - l - r, H - t - b
    xmax = max([s["throughput_tps"] for s in pts] + [1e-9])
    ymax = max([_num(s.get("p99_s")) or _num(s.get("p50_s")) or 0 for s in pts] + [1e-9])
    xt, yt = _nice_ticks(0, xmax), _nice_ticks(0, ymax)
    X = lambda v: l + pw * v / xt[-1]  # noqa: E731
    Y = lambda v: t + ph - ph * v / yt[-1]  # noqa: E731
    names = arms + sorted({s["arm"] for s in pts} - set(arms))
    colors = _arm_colors(names)
    parts = [M('<svg class="plot" viewBox="0 0 {} {}" width="{}" role="img" aria-label="throughput against latency">'
               '<title>throughput against latency</title>').format(W, H, W)]
    for v in xt:
        parts.append(M('<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" class="grid"/>'
                       '<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>').format(
            X(v), t, X(v), t + ph, X(v), t + ph + 13, _fmt_tick(v)))
    for v in yt:
        parts.append(M('<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" class="grid"/>'
                       '<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{}</text>').format(
            l, Y(v), l + pw, Y(v), l - 4, Y(v) + 3, _fmt_tick(v)))
    parts.append(M('<rect x="{}" y="{}" width="{}" height="{}" class="frame"/>').format(l, t, pw, ph))
    ly = t + 10
    for arm in names:
        mine = sorted((s for s in pts if s["arm"] == arm), key=lambda s: s["throughput_tps"])
        if not mine:
            continue
        c = colors[arm]
        for key, cls in (("p50_s", "fit"), ("p99_s", "fit dash")):
            xy = [(X(s["throughput_tps"]), Y(s[key])) for s in mine if _num(s.get(key)) is not None]
            if xy:
                parts.append(M('<polyline points="{}" class="{}" stroke="{}" fill="none"/>').format(
                    " ".join(f"{a:.1f},{b:.1f}" for a, b in xy), cls, c))
        for s in mine:
            for key, shape in (("p50_s", "c"), ("p99_s", "s")):
                v = _num(s.get(key))
                if v is None:
                    continue
                tip = M("{} {} · {:.1f} tok/s · {} {:.2f} s").format(arm, _load_x(s), s["throughput_tps"],
                                                                      key[:3], v)
                if shape == "c":
                    parts.append(M('<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"><title>{}</title></circle>').format(
                        X(s["throughput_tps"]), Y(v), c, tip))
                else:
                    parts.append(M('<rect x="{:.1f}" y="{:.1f}" width="6" height="6" fill="{}"><title>{}</title></rect>'
                                   ).format(X(s["throughput_tps"]) - 3, Y(v) - 3, c, tip))
            v = _num(s.get("p50_s"))
            if v is not None:
                parts.append(M('<text x="{:.1f}" y="{:.1f}" class="tick">{}</text>').format(
                    X(s["throughput_tps"]) + 5, Y(v) + 12, _load_x(s)))
        parts.append(M('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" class="fit"/>'
                       '<text x="{}" y="{}" class="lg">{}</text>').format(
            l + pw + 12, ly, l + pw + 32, ly, c, l + pw + 36, ly + 4, _clip(arm, 14)))
        ly += 16
    parts.append(M('<text x="{}" y="{}" class="tick">solid ● p50</text><text x="{}" y="{}" class="tick">'
                   'dashed ■ p99</text>').format(l + pw + 12, ly + 8, l + pw + 12, ly + 22))
    parts.append(M('<text x="{}" y="{}" class="axl" text-anchor="middle">throughput, output tokens/s</text>'
                   '<text x="14" y="{}" class="axl" text-anchor="middle" transform="rotate(-90 14 {})">'
                   'latency s</text></svg>').format(l + pw / 2, H - 6, t + ph / 2, t + ph / 2))
    return Markup("").join(parts)


def _clip(s: Any, n: int) -> str:
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------- tables with marks


_NUMERIC = re.compile(r"^[\s(]*[-+$]?[\d.,]+\s*(x|s|%|tok/s)?\)?$")


def _table_view(t: Table) -> dict[str, Any]:
    """A Table with CSS classes: refused multipliers and fits (with their reason), failed checks, numbers."""
    heads = [h.lower() for h in t.headers]
    rows = []
    for row in t.rows:
        refused_row = any(h == "citable" and x == "no" for h, x in zip(heads, row))
        refused_fit = "refused" in row
        cells = []
        for i, text in enumerate(row):
            h = heads[i] if i < len(heads) else ""
            cls = []
            if "not citable" in text or text == "refused" or (h == "citable" and text == "no"):
                cls.append("refused")
            if text and (refused_row or refused_fit) and (h == "reason" or h.startswith("refused")):
                cls.append("reason")
            if text in ("FAIL", "DRIFTED") or text.endswith(" ≠"):
                cls.append("bad")
            if "disjoint" in text:
                cls.append("disjoint")
            if _NUMERIC.match(text) or text == "—":
                cls.append("num")
            cells.append({"text": text, "cls": " ".join(cls)})
        rows.append({"cls": "refused-row" if refused_row else "", "cells": cells})
    return {"key": t.key, "title": t.title, "headers": t.headers, "rows": rows, "notes": t.notes}


# ---------------------------------------------------------------- the report page


def _shares_groups(summary: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    arms = [a["name"] for a in summary["arms"]]
    by = {(r["arm"], r["case"]): r for r in summary.get("time_shares") or []}
    groups = []
    for case in summary["cases"]:
        rs = []
        for a in arms:
            r = by.get((a, case))
            if r is None:
                continue
            rs.append({"arm": a, "total": _num(r["turn_s"]),
                       "segments": [("prefill", _num(r["prefill_s"])), ("decode", _num(r["decode_s"])),
                                    ("other", _num(r["other_s"]))]})
        if rs:
            groups.append((case, rs))
    return groups


def _scenario_groups(summary: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    p = summary.get("projection")
    if not p:
        return []
    rs = []
    for a in p["arms"]:
        if "refused" in a:
            rs.append({"arm": a["arm"], "note": f"refused: {a['refused']}"})
        elif a["total_s"] is None:
            rs.append({"arm": a["arm"], "note": "only one phase projected: "
                                                + (a.get("prefill_refused") or a.get("decode_refused") or "")})
        else:
            rs.append({"arm": a["arm"], "total": _num(a["total_s"]),
                       "segments": [("prefill", _num(a["prefill_s"])), ("decode", _num(a["decode_s"]))]})
    return [(f"scenario: {p['input_tokens']:,} input, {p['output_tokens']:,} output tokens", rs)]


def _scatters(summary: dict[str, Any]) -> list[dict[str, Any]]:
    arms = [a["name"] for a in summary["arms"]]
    colors = _arm_colors(arms)
    out = []
    for case in summary["cases"]:
        ds = [d for d in summary.get("decomposition") or [] if d["case"] == case and d.get("points")]
        if not ds:
            continue
        xs = [v for d in ds for v in d.get("x") or [] if _num(v) is not None]
        ys = [v for d in ds for v in d.get("y") or [] if _num(v) is not None]
        xmax, ymax = max(xs + [1]), max(ys + [1e-3])
        for d in ds:
            if not d.get("refused") and _num(d.get("intercept_s")) is not None:
                ymax = max(ymax, d["intercept_s"])
        svgs = [svg_scatter(d, colors.get(d["arm"], "#555"), xmax, ymax)
                for d in sorted(ds, key=lambda d: arms.index(d["arm"]) if d["arm"] in arms else 99)]
        out.append({"case": case, "svgs": svgs})
    return out


def _run_facts(summary: dict[str, Any]) -> list[tuple[str, str]]:
    run = summary["run"]
    host = run.get("host") or {}
    facts = [("run", f"{run.get('name')} ({run.get('run_id')})"), ("started", str(run.get("started_at"))),
             ("host", f"{host.get('cpu', '?')}, {host.get('cores', '?')} cores, {host.get('os', '?')}"),
             ("schedule", f"{run.get('repeats')} repeats, {run.get('order')} order, concurrency {run.get('concurrency')}"),
             ("calls", f"{run.get('calls')} model calls, {run.get('failed_calls')} failed"),
             ("baseline", str(summary["baseline"])), ("tool", f"leverbench {run.get('tool_version')}")]
    if run.get("resumed"):
        facts.append(("resumed", f"{run['resumed']} time(s)"))
    return facts


def render_html(summary: dict[str, Any], ledger: Ledger | None = None) -> str:
    """``report.html``: the run's conditions, tables, plots, warnings and (with the ledger) the replay.

    ``summary`` is the ``leverbench.summary/1`` dict; ``ledger`` is the run's ledger, needed only for the
    side-by-side replay (without it the page says where to get one).
    """
    tabs: dict[str, Any] = defaultdict(lambda: None)  # a table that is absent renders as nothing
    tabs.update({t.key: _table_view(t) for t in all_tables(summary)})
    arms = [a["name"] for a in summary["arms"]]
    load = [st for st in summary.get("load") or [] if isinstance(st, dict)]
    cost = summary.get("cost") or []
    cost_svg = None
    if cost:
        cost_svg = svg_hbars([(c["arm"], _num(c["gpu_hours_per_1000_turns"]),
                               f"{c['gpu_hours_per_1000_turns']:.2f} GPU-h") for c in cost],
                             label="GPU-hours per 1000 turns", axis="GPU-hours per 1000 turns")
    shares = _shares_groups(summary)
    scen = _scenario_groups(summary)
    replay = None
    if ledger is not None:
        data = replay_data(ledger, max_events=MAX_REPORT_EVENTS)
        if data["turns"]:
            replay = {"json": script_json(finite(data)), "data": data}
    discovered = [{"name": a["name"], "model": a.get("model"),
                   "json": json.dumps(finite(a.get("discovered") or {}), indent=1, ensure_ascii=False, default=str)}
                  for a in summary["arms"]]
    page = _env.get_template("report.html.j2").render(
        csp=CSP, style=Markup(_STYLE), script=Markup(_SCRIPT), title=f"leverbench: {summary['run'].get('name')}",
        summary=summary, facts=_run_facts(summary), tabs=tabs, arms=arms, discovered=discovered,
        shares_svg=svg_stacked_bars(shares, label="where the time goes, per case and arm") if shares else None,
        scenario_svg=svg_stacked_bars(scen, label="where the time would go in the scenario") if scen else None,
        scatters=_scatters(summary), load=load, load_svg=svg_load(load, arms) if load else None,
        cost_svg=cost_svg, warnings=summary.get("warnings") or [], replay=replay, has_ledger=ledger is not None,
        phase_colors=PHASE_COLORS)
    return page


# ---------------------------------------------------------------- the replay


def _store_text(ledger: Ledger) -> bool:
    return bool(((ledger.header.get("config") or {}).get("experiment") or {}).get("store_text"))


def _names(ledger: Ledger) -> tuple[list[str], list[str]]:
    cfg = ledger.header.get("config") or {}
    arms = [a["name"] for a in cfg.get("arms", []) if isinstance(a, dict) and "name" in a]
    cases = [c["name"] for c in cfg.get("cases", []) if isinstance(c, dict) and "name" in c]
    for r in ledger.of_kind("turn"):
        if r.get("arm") not in arms:
            arms.append(r.get("arm"))
        if r.get("case") not in cases:
            cases.append(r.get("case"))
    return arms, cases


def _last_user_prompt(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):  # content parts
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            if isinstance(c, str):
                return c if len(c) <= 400 else c[:200] + " … " + c[-180:]
    return None


def _chunks_text(call: dict[str, Any]) -> list[str] | None:
    """The text of each chunk, aligned with chunk_t, or None when the ledger did not store it."""
    n = len(call.get("chunk_t") or [])
    ct = call.get("chunk_text")
    if isinstance(ct, list) and len(ct) == n and all(isinstance(x, str) for x in ct):
        return ct
    out = call.get("output_text")
    chars = call.get("chunk_chars") or []
    if isinstance(out, str) and len(chars) == n:
        reasoning = call.get("reasoning_text") or ""
        full = reasoning + out if isinstance(reasoning, str) else out
        if sum(chars) == len(full):  # slice the stored output by the recorded chunk sizes
            pieces, i = [], 0
            for k in chars:
                pieces.append(full[i:i + k])
                i += k
            return pieces
    return None


def _turn_view(turn: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    calls = sorted(calls, key=lambda c: (c.get("step", 0), c.get("t_send") or 0))
    t0 = min((c["t_send"] for c in calls if _num(c.get("t_send")) is not None), default=None)
    out_calls = []
    text_ok = bool(calls)
    end = 0.0
    for c in calls:
        start = (c["t_send"] - t0) if t0 is not None and _num(c.get("t_send")) is not None else 0.0
        start += _num(c.get("connect_s")) or 0.0  # its chunk times count from when its connection was ready
        texts = _chunks_text(c)
        if texts is None:
            text_ok = False
        ct = [round(float(x), 4) for x in c.get("chunk_t") or []]
        lat = _num(c.get("latency_s"))
        err = c.get("error")
        tc = c.get("tool_calls") or []
        out_calls.append({
            "step": c.get("step", 0), "start": round(start, 4), "ttft": _num(c.get("ttft_s")),
            "latency": lat, "t": ct, "chars": list(c.get("chunk_chars") or [0] * len(ct)), "text": texts,
            "prompt": _last_user_prompt(c.get("input_messages")),
            "tokens": c.get("completion_tokens"),
            "tools": [f"{t.get('name', '')}({t.get('arguments', '')})" for t in tc if isinstance(t, dict)],
            "error": None if err is None else (f"{err.get('class', 'error')}: {err.get('message', '')}"
                                               if isinstance(err, dict) else str(err)),
        })
        end = max(end, start + (lat if lat is not None else (ct[-1] if ct else 0.0)))
    turn_s = _num(turn.get("turn_s"))
    return {"arm": turn["arm"], "case": turn["case"], "repeat": turn["repeat"],
            "end": round(max(end, turn_s or 0.0), 4), "turn_s": turn_s, "text": text_ok,
            "error": None if turn.get("error") is None else str(turn.get("error")), "calls": out_calls}


def replay_data(ledger: Ledger, *, cases: list[str] | None = None, arms: list[str] | None = None,
                repeats: list[int] | None = None, max_events: int | None = None) -> dict[str, Any]:
    """The replay's data: for each finished turn (arm, case, repeat), its calls' chunk times and texts.

    Call k of a turn starts at its t_send + connect_s − the turn's first t_send; chunk times are seconds after
    that (after its connection was ready).  ``text_stored`` is False when the ledger holds no text (then the replay shows timing only).
    With ``max_events``, whole repeats are added in order while the chunk count stays under it.
    """
    all_arms, all_cases = _names(ledger)
    want_arms = arms or all_arms
    want_cases = cases or all_cases
    turns: dict[tuple[str, str, int], dict[str, Any]] = {}
    for t in ledger.of_kind("turn"):
        k = (t.get("arm"), t.get("case"), t.get("repeat"))
        if k[0] in want_arms and k[1] in want_cases and (repeats is None or k[2] in repeats):
            turns[k] = t  # the latest attempt of a unit (a failed one re-run on resume supersedes it)
    by_id: dict[str, list[dict[str, Any]]] = {}
    ids = {t.get("turn_id") for t in turns.values()}
    for c in ledger.of_kind("call"):
        if c.get("turn_id") in ids:
            by_id.setdefault(c["turn_id"], []).append(c)
    case_pos = {c: i for i, c in enumerate(want_cases)}
    units: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for k, t in turns.items():
        if isinstance(k[2], int):
            units.setdefault((k[2], case_pos[k[1]]), []).append(t)
    views: list[dict[str, Any]] = []
    events = 0
    truncated = False
    for key in sorted(units):  # repeat by repeat, case by case, all arms of a case together
        batch = [_turn_view(t, by_id.get(t.get("turn_id"), [])) for t in units[key]]
        n = sum(len(c["t"]) + 1 for v in batch for c in v["calls"])
        if max_events is not None and views and events + n > max_events:
            truncated = True
            break
        events += n
        views.extend(batch)
    arm_h = ledger.header.get("arms") or {}
    order = {a: i for i, a in enumerate(want_arms)}
    views.sort(key=lambda v: (case_pos[v["case"]], v["repeat"], order.get(v["arm"], 99)))
    return {
        "text_stored": _store_text(ledger) or any(v["text"] for v in views),
        "arms": [{"name": a, "role": (arm_h.get(a) or {}).get("role"),
                  "conditions": {k: str(v) for k, v in ((arm_h.get(a) or {}).get("conditions") or {}).items()}}
                 for a in want_arms],
        "cases": [c for c in want_cases if any(v["case"] == c for v in views)],
        "repeats": sorted({v["repeat"] for v in views}),
        "truncated": truncated, "turns_embedded": len(views), "turns_recorded": len(turns),
        "turns": views,
    }


def render_replay(ledger: Ledger, case: str, arms: list[str], repeat: int = 0) -> str:
    """One HTML page: the chosen arms' answers for one case and repeat, streaming side by side at their
    recorded chunk times.  Raises :class:`BadInput` naming the valid values for an unknown case, arm or repeat.
    """
    all_arms, all_cases = _names(ledger)
    if case not in all_cases:
        raise BadInput(f"unknown case {case!r}; the run's cases: {', '.join(map(repr, all_cases)) or 'none'}")
    if not arms:
        raise BadInput(f"name at least one arm; the run's arms: {', '.join(map(repr, all_arms))}")
    bad = [a for a in arms if a not in all_arms]
    if bad:
        raise BadInput(f"unknown arm(s) {', '.join(map(repr, bad))}; the run's arms: {', '.join(map(repr, all_arms))}")
    if len(set(arms)) != len(arms):
        raise BadInput(f"arm named twice in {', '.join(arms)}")
    data = replay_data(ledger, cases=[case], arms=arms, repeats=[repeat])
    have = {v["arm"] for v in data["turns"]}
    missing = [a for a in arms if a not in have]
    if missing:
        reps = sorted({t.get("repeat") for t in ledger.of_kind("turn") if t.get("case") == case
                       and t.get("arm") in arms and isinstance(t.get("repeat"), int)})
        raise BadInput(f"no finished turn of case {case!r}, repeat {repeat} for arm(s) {', '.join(map(repr, missing))}; "
                       f"repeats recorded for this case: {', '.join(map(str, reps)) or 'none'}")
    name = ((ledger.header.get("config") or {}).get("experiment") or {}).get("name") or "run"
    return _env.get_template("replay.html.j2").render(
        csp=CSP, style=Markup(_STYLE), script=Markup(_SCRIPT),
        title=f"leverbench replay: {name} · {case} · repeat {repeat}", run_name=name,
        run_id=ledger.header.get("run_id"), case=case, repeat=repeat, arms=arms,
        replay={"json": script_json(finite(data)), "data": data})
