"""The history plot of ``leverbench compare --format html`` (:mod:`.compare_html`): per run a column of marks, each a
figure with its interval as a whisker and its hover, on a log axis with the line at 1x, the threshold's band and a
reference line.  Only drawing: the marks are made by :mod:`.compare_html`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup

from .svg import M, _axes, _clip, _nice_ticks

#: The colour of a point by its verdict (an arm's, or a lever's on the ratio of its multipliers); the baseline's.
COLORS = {"slower": "#c62828", "faster": "#2e8b3a", "same": "#8a939c", "undecided": "#e08a1e", "refused": "#8a1c1c",
          "pays more": "#2e8b3a", "pays less": "#c62828", "baseline": "#1d1d1f"}


#: The farthest a history plot's axis reaches from 1x either way (a ratio beyond is drawn at its edge).
EXTREME = 1000.0


@dataclass
class Mark:
    """One point of a history plot: its value and interval, its colour's key (a verdict, or "baseline"), its hover
    text; ``hollow``: a second figure of the same run (corrected for the machine), drawn beside."""

    value: float | None
    low: float | None
    high: float | None
    key: str
    tip: str
    hollow: bool = False



# ---------------------------------------------------------------- the plot


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Round values within [lo, hi] (0 < lo < 1 < hi): evenly spaced where the range is narrow, else m × 10^k."""
    if hi / lo < 3:
        return [v for v in _nice_ticks(lo, hi, 6) if lo <= v <= hi]
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ms = (1, 2, 5) if hi / lo > 30 else (1, 1.5, 2, 3, 4, 5, 7)
    return [v for k in range(k0, k1 + 1) for m in ms if lo <= (v := round(m * 10.0 ** k, 10)) <= hi]


def _range(values: list[float], whiskers: list[float]) -> tuple[float, float]:
    """The axis' ends: the values, and the whiskers' ends not far beyond them (a whisker of 2 repeats may span 100x:
    it is clipped, marked), with a margin."""
    lo, hi = max(min(values), EXTREME ** -1), min(max(values), EXTREME)  # (a figure beyond: at the edge, marked)
    pad = max(math.log(hi / lo), math.log(1.2))
    lo = min([lo] + [w for w in whiskers if w >= lo * math.exp(-pad)])
    hi = max([hi] + [w for w in whiskers if w <= hi * math.exp(pad)])
    return max(lo / 1.06, 1.0 / EXTREME), min(hi * 1.06, EXTREME)


def _point(x: float, y: float, m: Mark, color: str) -> Markup:
    if m.key == "refused":  # a cross, never a dot that could read as a figure
        return M('<path d="M{:.1f},{:.1f} l8,8 m0,-8 l-8,8" stroke="{}" stroke-width="2"/>').format(x - 4, y - 4, color)
    if m.key == "baseline":
        return M('<rect x="{:.1f}" y="{:.1f}" width="8" height="8" fill="{}"/>').format(x - 4, y - 4, color)
    if m.hollow:
        return M('<path d="M{:.1f},{:.1f} l5,5 l-5,5 l-5,-5 z" fill="#fff" stroke="{}" stroke-width="1.6"/>').format(
            x, y - 5, color)
    return M('<circle cx="{:.1f}" cy="{:.1f}" r="4.5" fill="{}" stroke="#fff"/>').format(x, y, color)


def svg_history(label: str, runs: Sequence[tuple[str, str]], columns: Sequence[Sequence[Mark]], *, axis: str,
                band: tuple[float, float] | None = None, ref: tuple[float, str] | None = None) -> Markup:
    """One history plot: per run (its label and start, in order) a column of :class:`Mark`, each with its
    interval as a whisker and its ``tip`` as its ``<title>``; the line at 1x, the shaded *band* and the dashed
    *ref* line (value, words) where given; a trend line through the points not refused. Log vertical axis."""
    marks = [m for col in columns for m in col]
    values = [1.0] + [m.value for m in marks if m.value is not None and m.value > 0]
    values += [v for v in (*(band or ()), *(ref[:1] if ref else ())) if v > 0]
    whiskers = [w for m in marks for w in (m.low, m.high) if w is not None and 0 < w < math.inf]
    y0, y1 = _range(values, whiskers)
    W, H, l, r, t, b = 820, 300, 64, 16, 30, 58
    pw, ph = W - l - r, H - t - b
    col = pw / max(len(runs), 1)
    X: Callable[[float], float] = lambda i: l + col * (i + 0.5)  # noqa: E731
    Y: Callable[[float], float] = lambda v: t + ph - ph * math.log(min(max(v, y0), y1) / y0) / math.log(y1 / y0)  # noqa: E731
    parts = [M('<svg class="plot" viewBox="0 0 {} {}" width="{}" role="img" aria-label="{}"><title>{}</title>').format(
        W, H, W, label, label)]
    if band:
        parts.append(M('<rect x="{}" y="{:.1f}" width="{}" height="{:.1f}" class="band"><title>within the threshold: '
                       '[{:.3f}, {:.3f}]</title></rect>').format(l, Y(band[1]), pw, Y(band[0]) - Y(band[1]), *band))
    parts += _axes(X, Y, [], _log_ticks(y0, y1), (l, t, pw, ph), tick_gap=(12, 4))
    parts.append(M('<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" class="one"/>').format(l, Y(1.0), l + pw, Y(1.0)))
    if ref:
        parts.append(M('<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" class="ref"/><text x="{}" y="{:.1f}" '
                       'class="tick" text-anchor="end">{}</text>').format(
            l, Y(ref[0]), l + pw, Y(ref[0]), l + pw - 4, Y(ref[0]) - 4, ref[1]))
    trend = [(X(i), Y(m.value)) for i, c in enumerate(columns) for m in c[:1]
             if m.value is not None and m.value > 0 and m.key != "refused"]
    if len(trend) > 1:
        parts.append(M('<polyline points="{}" class="trend"/>').format(" ".join(f"{a:.1f},{b:.1f}" for a, b in trend)))
    for i, (name, start) in enumerate(runs):
        parts.append(M('<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>'
                       '<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>').format(
            X(i), t + ph + 13, _clip(f"{i + 1}. {name}", max(8, int(col / 6))), X(i), t + ph + 25,
            _clip(start, max(8, int(col / 6)))))
        for k, m in enumerate(columns[i] if i < len(columns) else []):
            x, c = X(i) + 12 * k, COLORS.get(m.key, "#555")
            g = [M("<g><title>{}</title>").format(m.tip)]
            if m.value is None or m.value <= 0:
                g.append(M('<text x="{:.1f}" y="{:.1f}" class="note" text-anchor="middle">no ratio</text>').format(
                    x, Y(1.0) - 6))
            else:
                if m.low is not None and m.high is not None and m.key != "refused":
                    lo, hi = max(m.low, y0), min(m.high, y1)
                    g.append(M('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" class="whisk"/>'
                               '<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"/>'
                               '<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}"/>').format(
                        x, Y(lo), x, Y(hi), c, x - 4, Y(lo), x + 4, Y(lo), c, x - 4, Y(hi), x + 4, Y(hi), c))
                    g += [M('<path d="M{:.1f},{:.1f} l-4,{} h8 z" fill="{}"/>').format(x, Y(e), s, c)
                          for e, s, clipped in ((hi, 7, m.high > y1), (lo, -7, m.low < y0)) if clipped]
                g.append(_point(x, Y(m.value), m, c))
            parts.append(Markup("").join(g) + M("</g>"))
    lx = l
    for key in dict.fromkeys("corrected for the machine" if m.hollow else m.key for m in marks):  # the legend
        hollow = key.startswith("corrected")
        parts.append(_point(lx + 5, 14, Mark(1, None, None, "same" if hollow else key, "", hollow),
                     COLORS.get(key, "#555")) + M('<text x="{}" y="18" class="lg">{}</text>').format(lx + 14, key))
        lx += 30 + 6 * len(key)
    parts.append(M('<text x="14" y="{:.1f}" class="axl" text-anchor="middle" transform="rotate(-90 14 {:.1f})">{}'
                   '</text><text x="{:.1f}" y="{}" class="axl" text-anchor="middle">runs, in the order they started'
                   '</text></svg>').format(t + ph / 2, t + ph / 2, axis, l + pw / 2, H - 4))
    return Markup("").join(parts)
