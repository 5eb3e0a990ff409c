"""The plot of a lever under load (issue 25 part 6): its multiplier against the load, level by level, with the
crossover and each arm's capacity at the SLOs marked; inline SVG drawn from ``summary.json`` numbers, every
argument escaped (:mod:`.svg`'s rules)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from markupsafe import Markup

from .load_levers import METRIC_WORDS, capacity_load, num, shown_metrics
from .svg import _axes, _nice_ticks

if TYPE_CHECKING:
    from ..schema.load_lever_rows import CapacityRow, LoadLeverRow

M = Markup
METRIC_COLORS = ("#4e79a7", "#e15759", "#59a14f")
CAPACITY_COLORS = {"arm": "#b07aa1", "vs": "#9c755f"}


def svg_lever_load(row: LoadLeverRow, capacity: Sequence[CapacityRow]) -> Markup:
    """One lever pair on one sweep: each shown metric's multiplier (> 1: the lever pays) against the load, its 95 %
    interval as a bar, a level the guard left out hollow; the y axis scaled on the citable multipliers, a value
    above it a triangle at the top edge ("above the plot"); 1.0 dashed; the crossover as a vertical line over its
    interval; each arm's capacity at the SLOs as a triangle on the load axis."""
    metrics = shown_metrics(row)
    loads = [lv["load"] for lv in row["levels"]]
    caps = {who: next((c for c in capacity if c["arm"] == row[who] and c["sweep"] == row["sweep"]
                       and c["x"] == row["x"]), None)
            for who in ("arm", "vs")}
    xs_all = loads + [c["load"] for c in caps.values() if c and c["load"] is not None]
    # scaled on the citable multipliers (a refused level's may be anything: 100x of calls that failed in 10 ms);
    # the rest are drawn clipped at the top, marked
    ys = [v for m in metrics for lv in m["levels"] if lv["citable"] for v in (lv["value"], lv["high"]) if v is not None]
    ys = ys or [v for m in metrics for lv in m["levels"] for v in (lv["value"], lv["high"]) if v is not None]
    W, H, l, r, t, b = 760, 300, 56, 190, 14, 40
    pw, ph = W - l - r, H - t - b
    xt, yt = _nice_ticks(0, max(xs_all + [1.0]) * 1.05), _nice_ticks(0, max(ys + [1.2]) * 1.05)
    X: Callable[[float], float] = lambda v: l + pw * v / xt[-1]  # noqa: E731
    Y: Callable[[float], float] = lambda v: t + ph - ph * min(v, yt[-1]) / yt[-1]  # noqa: E731
    label = f"{row['lever']} under load: {row['arm']} vs {row['vs']}"
    parts = [M('<svg class="plot" viewBox="0 0 {} {}" width="{}" role="img" aria-label="{}"><title>{}</title>').format(
        W, H, W, label, label)]
    parts += _axes(X, Y, xt, yt, (l, t, pw, ph), tick_gap=(13, 4))
    parts.append(M('<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#333" class="dash"/>'
                   '<text x="{}" y="{:.1f}" class="tick">1.0 = even</text>').format(
        l, Y(1.0), l + pw, Y(1.0), l + 4, Y(1.0) - 4))
    ly = t + 10
    for i, m in enumerate(metrics):
        c = METRIC_COLORS[i % len(METRIC_COLORS)]
        cross = m.get("crossover")
        if cross:
            lo = cross["low"] if cross["low"] is not None else cross["between"][0]
            hi = cross["high"] if cross["high"] is not None else cross["between"][1]
            parts.append(M('<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="{}" opacity="0.12"/>'
                           '<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="{}" class="dash"/>'
                           '<text x="{:.1f}" y="{}" class="tick" fill="{}">crosses at {}</text>').format(
                X(lo), t, max(X(hi) - X(lo), 1.0), ph, c, X(cross["load"]), t, X(cross["load"]), t + ph, c,
                X(cross["load"]) + 3, t + 12 + 12 * i, c, num(cross["load"], 3)))
        pts = [(X(v["load"]), Y(v["value"])) for v in m["levels"] if v["citable"] and v["value"] is not None]
        if pts:
            parts.append(M('<polyline points="{}" class="fit" stroke="{}" fill="none"/>').format(
                " ".join(f"{a:.1f},{b:.1f}" for a, b in pts), c))
        for v in m["levels"]:
            if v["value"] is None:
                continue
            if v["low"] is not None and v["high"] is not None:
                parts.append(M('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"/>').format(
                    X(v["load"]), Y(v["low"]), X(v["load"]), Y(v["high"]), c))
            if v["value"] > yt[-1]:
                parts.append(M('<path d="M{:.1f},{} l-5,8 h10 z" class="clipped" fill="{}" stroke="{}"><title>{} at '
                               '{}: above the plot: {:.2f}x{}</title></path>').format(
                    X(v["load"]), t, c if v["citable"] else "#fff", c, METRIC_WORDS[m["metric"]], num(v["load"]),
                    v["value"], "" if v["citable"] else " (left out by the guard)"))
                continue
            parts.append(M('<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="{}" stroke="{}"><title>{} at {}: {:.2f}x'
                           '{}</title></circle>').format(
                X(v["load"]), Y(v["value"]), c if v["citable"] else "#fff", c, METRIC_WORDS[m["metric"]],
                v["load"], v["value"], "" if v["citable"] else " (left out by the guard)"))
        parts.append(M('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" class="fit"/>'
                       '<text x="{}" y="{}" class="lg">{}</text>').format(
            l + pw + 12, ly, l + pw + 32, ly, c, l + pw + 36, ly + 4, METRIC_WORDS[m["metric"]]))
        ly += 16
    for who in ("arm", "vs"):
        cap = caps[who]
        if not cap or cap["load"] is None:
            continue
        x, c = X(cap["load"]), CAPACITY_COLORS[who]
        said = capacity_load(cap, unit=False)
        parts.append(M('<path d="M{:.1f},{} l-6,10 h12 z" fill="{}"><title>{} capacity at the SLOs: {}</title>'
                       '</path>').format(x, t + ph - 10, c, row[who], capacity_load(cap)))
        parts.append(M('<path d="M{},{} l-5,9 h10 z" fill="{}"/><text x="{}" y="{}" class="lg">{} SLO capacity {}'
                       '</text>').format(l + pw + 22, ly - 6, c, l + pw + 36, ly + 4, row[who], said))
        ly += 16
    axis = {"concurrency": "requests in flight (closed loop)", "rate": "requests per second (open loop)",
            "speed": "trace replay speed"}.get(row["x"], row["x"])
    parts.append(M('<text x="{}" y="{}" class="axl" text-anchor="middle">{}</text>'
                   '<text x="14" y="{}" class="axl" text-anchor="middle" transform="rotate(-90 14 {})">'
                   'multiplier (&gt; 1: pays)</text></svg>').format(l + pw / 2, H - 6, axis, t + ph / 2, t + ph / 2))
    return Markup("").join(parts)
