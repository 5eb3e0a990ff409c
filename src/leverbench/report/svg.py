"""The HTML pages' plots: inline SVG drawn from ``summary.json`` numbers (and ``analyze``'s).

Every argument is escaped: the SVG is built with :class:`markupsafe.Markup` formatting
(``M("...{}...").format(x)`` escapes ``x``), so a case or arm name cannot inject markup.
Each plot returns one ``<svg>`` element; the page (:mod:`.html`) places it.

Public API: :func:`svg_stacked_bars`, :func:`svg_hbars`, :func:`svg_scatter`, :func:`svg_load`,
:func:`arm_colors`, :data:`PHASE_COLORS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from markupsafe import Markup
from typing_extensions import NotRequired, TypedDict

from .jsonio import number

if TYPE_CHECKING:
    from ..schema.load_rows import LoadRow
    from ..schema.rate_rows import DecompositionRow

__all__ = ["PHASE_COLORS", "Bar", "arm_colors", "svg_hbars", "svg_load", "svg_scatter", "svg_stacked_bars"]

#: Calls drawn per regression scatter at most (an even sample of the cell's calls beyond it).
MAX_SCATTER_POINTS = 400

PHASE_COLORS = {"prefill": "#4e79a7", "decode": "#f28e2b", "other": "#bab0ac"}
ARM_COLORS = ["#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f",
              "#79706e"]




class Bar(TypedDict):
    """One bar of :func:`svg_stacked_bars`: its arm, its segments (phase, seconds) and the total shown at its end;
    or ``note``, shown instead of a bar (a refused projection)."""

    arm: str
    segments: NotRequired[list[tuple[str, float | None]]]
    total: NotRequired[float | None]
    note: NotRequired[str]


# ---------------------------------------------------------------- axes and colours


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


def arm_colors(names: Iterable[str]) -> dict[str, str]:
    return {a: ARM_COLORS[i % len(ARM_COLORS)] for i, a in enumerate(names)}


M = Markup  # Markup("...{}...").format(x) escapes x


# ---------------------------------------------------------------- plots (inline SVG)


def svg_stacked_bars(groups: Sequence[tuple[str, Sequence[Bar]]], *, label: str, unit: str = "s") -> Markup:
    """Horizontal stacked bars: per group (a case, or the scenario), one bar per arm (:class:`Bar`)."""
    rows = [r for _, rs in groups for r in rs]
    vmax = max([sum(v for _, v in r.get("segments") or [] if v) for r in rows] +
               [r.get("total") or 0 for r in rows] + [1e-9])
    ticks = _nice_ticks(0, vmax)
    vmax = ticks[-1]
    left, width, right, rh, gap, top = 170, 520, 70, 22, 6, 24
    height = top + sum(18 + len(rs) * (rh + gap) for _, rs in groups) + 30
    W = left + width + right
    x: Callable[[float], float] = lambda v: left + width * v / vmax  # noqa: E731
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
            cx: float = left
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
    colors = arm_colors(n for n, _, _ in items)
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


def _axes(X: Callable[[float], float], Y: Callable[[float], float], xt: list[float], yt: list[float],
          box: tuple[float, float, float, float], *, tick_gap: tuple[int, int]) -> list[Markup]:
    """A plot's grid lines with their tick labels on both axes, then its frame.  ``X``/``Y`` map values to
    the page; ``box`` = (left, top, width, height) of the plot area; ``tick_gap`` = (how far below the
    area the x labels sit, how far left of it the y labels end)."""
    l, t, pw, ph = box
    below, left = tick_gap
    out = [M('<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" class="grid"/>'
             '<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>').format(
        X(v), t, X(v), t + ph, X(v), t + ph + below, _fmt_tick(v)) for v in xt]
    out += [M('<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" class="grid"/>'
              '<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{}</text>').format(
        l, Y(v), l + pw, Y(v), l - left, Y(v) + 3, _fmt_tick(v)) for v in yt]
    out.append(M('<rect x="{}" y="{}" width="{}" height="{}" class="frame"/>').format(l, t, pw, ph))
    return out


def svg_scatter(d: DecompositionRow, color: str, xmax: float, ymax: float) -> Markup:
    """One cell's calls: latency against output tokens, with the fitted line when the fit was not refused.

    The fit is drawn solid over the measured output range and dashed back to 0 output tokens, where it
    meets the intercept (prefill + overhead).
    """
    W, H, l, r, t, b = 280, 212, 44, 12, 46, 34
    pw, ph = W - l - r, H - t - b
    xt, yt = _nice_ticks(0, xmax, 4), _nice_ticks(0, ymax, 4)
    X: Callable[[float], float] = lambda v: l + pw * v / xt[-1]  # noqa: E731
    Y: Callable[[float], float] = lambda v: t + ph - ph * v / yt[-1]  # noqa: E731
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
              if number(xv) is not None and number(yv) is not None]
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
    parts += _axes(X, Y, xt, yt, (l, t, pw, ph), tick_gap=(12, 3))
    tps, intercept = number(d.get("decode_tps")), number(d.get("intercept_s"))
    if not d.get("refused") and tps and intercept is not None:
        a, bslope = intercept, 1.0 / tps
        x0, x1 = d.get("output_min") or 0, d.get("output_max") or xmax
        clip: Callable[[float], float] = lambda xv: min(max(a + bslope * xv, 0), yt[-1])  # noqa: E731
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


def _load_x(st: LoadRow) -> str:
    if st.get("concurrency") is not None:
        return f"c={st['concurrency']}"
    if st.get("rate") is not None:
        return f"{st['rate']}/s"
    return str(st.get("stage", ""))


#: The latencies of the load plot: (key, line class, marker: c a circle, s a square).
_LATENCIES: tuple[tuple[Literal["p50_s", "p99_s"], str, str], ...] = (("p50_s", "fit", "c"), ("p99_s", "fit dash", "s"))


def svg_load(load: Sequence[LoadRow], arms: list[str]) -> Markup:
    """Throughput (x) against latency (y, p50 solid, p99 dashed), one line per arm through its load stages."""
    pts = [(s, tps) for s in load if (tps := number(s.get("throughput_tps"))) is not None]
    W, H, l, r, t, b = 760, 340, 60, 140, 14, 40
    pw, ph = W - l - r, H - t - b
    xmax = max([tps for _, tps in pts] + [1e-9])
    ymax = max([number(s.get("p99_s")) or number(s.get("p50_s")) or 0 for s, _ in pts] + [1e-9])
    xt, yt = _nice_ticks(0, xmax), _nice_ticks(0, ymax)
    X: Callable[[float], float] = lambda v: l + pw * v / xt[-1]  # noqa: E731
    Y: Callable[[float], float] = lambda v: t + ph - ph * v / yt[-1]  # noqa: E731
    names = arms + sorted({s["arm"] for s, _ in pts} - set(arms))
    colors = arm_colors(names)
    parts = [M('<svg class="plot" viewBox="0 0 {} {}" width="{}" role="img" aria-label="throughput against latency">'
               '<title>throughput against latency</title>').format(W, H, W)]
    parts += _axes(X, Y, xt, yt, (l, t, pw, ph), tick_gap=(13, 4))
    ly = t + 10
    for arm in names:
        mine = sorted(((s, tps) for s, tps in pts if s["arm"] == arm), key=lambda p: p[1])
        if not mine:
            continue
        c = colors[arm]
        for key, cls, _ in _LATENCIES:
            xy = [(X(tps), Y(v)) for s, tps in mine if (v := number(s.get(key))) is not None]
            if xy:
                parts.append(M('<polyline points="{}" class="{}" stroke="{}" fill="none"/>').format(
                    " ".join(f"{a:.1f},{b:.1f}" for a, b in xy), cls, c))
        for s, tps in mine:
            for key, _, shape in _LATENCIES:
                v = number(s.get(key))
                if v is None:
                    continue
                tip = M("{} {} · {:.1f} tok/s · {} {:.2f} s").format(arm, _load_x(s), tps, key[:3], v)
                if shape == "c":
                    parts.append(M('<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"><title>{}</title></circle>'
                                   ).format(X(tps), Y(v), c, tip))
                else:
                    parts.append(M('<rect x="{:.1f}" y="{:.1f}" width="6" height="6" fill="{}"><title>{}</title></rect>'
                                   ).format(X(tps) - 3, Y(v) - 3, c, tip))
            v = number(s.get("p50_s"))
            if v is not None:
                parts.append(M('<text x="{:.1f}" y="{:.1f}" class="tick">{}</text>').format(
                    X(tps) + 5, Y(v) + 12, _load_x(s)))
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


def _clip(x: object, n: int) -> str:
    s = str(x)
    return s if len(s) <= n else s[: n - 1] + "…"

