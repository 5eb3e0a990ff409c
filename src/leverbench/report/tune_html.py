"""``OUT/tune.html``: a tune's answer as one self-contained page (issue 40), from ``tune.json``
(:class:`~leverbench.schema.tune_rows.TuneSummary`) alone.

Per operating point: the answer (the words of :func:`.tune.point_lines`, so the page and the terminal never
disagree), one plot of the search, and its races as a table with a link to each race's own ``report.html``.

**The plot.**  One column per race, numbered in the order the races ran (``path``: the sweeps', then those the
final check added).  The vertical axis is speed against the baseline (baseline time / a configuration's time, so
1 is the baseline and higher is faster).  A race measures only the ratio of its two configurations, so each
configuration is placed by **chaining**: the baseline sits at 1, and a race's candidate at its incumbent's place
times the race's ratio; a configuration measured twice keeps the place of its first race from a placed one, and a
refused race places nothing. Chaining multiplies point estimates: the errors of the races along the chain add up,
and no interval is claimed for a chained place. What is drawn per race is the race's own measurement: a stem from
its incumbent's place to a circle at incumbent × ratio, its whisker the race's own interval (incumbent × [low,
high]), the incumbent's own uncertainty not included. Adopted races (a ``better`` that moved the incumbent) are
thick with a filled circle; refused races are a red ✕ at the incumbent's place with no stem, whatever their ratio,
so a refusal never looks like a win. The race of the baseline against the winner is drawn from 1: beside the chained
place it shows the direct measurement the answer is reported with.

The page shares the run report's style sheet and Content-Security-Policy (:mod:`.html`); its plots are inline
SVG built with :class:`markupsafe.Markup` formatting, which escapes every argument.

Public API: :func:`render_tune_html`, :func:`chained_levels`, :func:`adopted`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from markupsafe import Markup
from typing_extensions import TypedDict

from ..knob_values import config_words
from ..schema.tune_rows import PointRow, RaceRow, TuneSummary
from .svg import M, _axes, _clip, _nice_ticks
from .tune import OUTCOME_WORDS, point_lines, race_line

__all__ = ["adopted", "chained_levels", "render_tune_html"]

#: Per outcome: the colour of its stem and whisker.
COLORS = {"better": "#2e8b3a", "same": "#8a939c", "worse": "#b4563a", "undecided": "#e08a1e", "refused": "#c62828"}


def _key(config: dict[str, object]) -> str:
    return config_words(config.items())


def _changed(r: RaceRow) -> str:
    """The knobs a race's candidate changes from its incumbent, ``k=4`` (all of them if none differ)."""
    diff = {k: v for k, v in r["candidate"].items() if r["incumbent"].get(k) != v}
    return config_words((diff or r["candidate"]).items())


def _usable(r: RaceRow) -> Optional[float]:
    """The race's ratio where it can place a configuration: not refused, finite and positive."""
    x = r["ratio"]
    if r["outcome"] == "refused" or x is None or not (math.isfinite(x) and x > 0):
        return None
    return x


def chained_levels(baseline: dict[str, object], path: list[RaceRow]) -> dict[str, float]:
    """Each configuration's speed against the baseline, by chaining the races' ratios (module docstring): the
    baseline at 1; in path order, a race with one end placed places the other (candidate = incumbent × ratio,
    incumbent = candidate / ratio), repeated until no race places anything new; first placement kept.  Keyed
    by the configuration in words (:func:`leverbench.knob_values.config_words`)."""
    levels = {_key(baseline): 1.0}
    changed = True
    while changed:
        changed = False
        for r in path:
            x = _usable(r)
            inc, cand = _key(r["incumbent"]), _key(r["candidate"])
            if x is None or (inc in levels) == (cand in levels):
                continue
            if inc in levels:
                levels[cand] = levels[inc] * x
            else:
                levels[inc] = levels[cand] / x
            changed = True
    return levels


def adopted(baseline: dict[str, object], path: list[RaceRow]) -> list[bool]:
    """Per race of *path*, whether it moved the incumbent, replaying the search's rule
    (:mod:`leverbench.tune.search`): ``better`` with the incumbent of the moment as its incumbent, and a candidate
    never the incumbent before."""
    incumbent, been, out = _key(baseline), {_key(baseline)}, []
    for r in path:
        cand = _key(r["candidate"])
        moved = r["outcome"] == "better" and _key(r["incumbent"]) == incumbent and cand not in been
        if moved:
            incumbent = cand
            been.add(cand)
        out.append(moved)
    return out


def _same(a: RaceRow, b: RaceRow) -> bool:
    return (a["incumbent"], a["candidate"], a["run_dir"]) == (b["incumbent"], b["candidate"], b["run_dir"])


def _interval(r: RaceRow) -> str:
    x, lo, hi = r["ratio"], r["low"], r["high"]
    if x is None:
        return "—"
    ends = f" [{lo:.2f}–{hi:.2f}]" if lo is not None and hi is not None and 0 < lo and hi < math.inf else ""
    return f"{x:.2f}x{ends}"


def report_link(run_dir: Optional[str], out: Optional[Path]) -> Optional[str]:
    """The race's ``report.html`` relative to *out* (where ``tune.html`` is), when the file is there: at
    *run_dir* as the tune wrote it, else at ``out/races/<its name>`` (a tune directory moved since)."""
    if run_dir is None or out is None:
        return None
    for d in (Path(run_dir), out / "races" / Path(run_dir).name):
        if (d / "report.html").is_file():
            return Path(os.path.relpath(d / "report.html", out)).as_posix()
    return None


# ---------------------------------------------------------------- the plot


def _cross(x: float, y: float, color: str, tip: str) -> Markup:
    """A refused race's mark: a cross, no stem and no circle."""
    return M('<g class="refused" stroke="{}"><title>{}</title><line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}"/>'
             '<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}"/></g>').format(
        color, tip, x - 5, y - 5, x + 5, y + 5, x - 5, y + 5, x + 5, y - 5)


def _legend(x0: float, y: float) -> list[Markup]:
    items = [("better, adopted", "better", True), ("better (not adopted)", "better", False),
             ("no better", "same", False), ("worse", "worse", False), ("undecided", "undecided", False)]
    out: list[Markup] = []
    x = x0
    for text, outcome, filled in items:
        c = COLORS[outcome]
        out.append(M('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="{}"{}/>'
                     '<circle cx="{}" cy="{}" r="3.5" fill="{}" stroke="{}"/>'
                     '<text x="{}" y="{}" class="lg">{}</text>').format(
            x, y + 6, x + 16, y - 2, c, 3 if filled else 1.6, M(' stroke-dasharray="3 2"') if outcome == "undecided"
            else "", x + 16, y - 2, c if filled else "#fff", c, x + 24, y + 4, text))
        x += 40 + 6.2 * len(text)
    out.append(_cross(x + 6, y, COLORS["refused"], "refused") + M('<text x="{}" y="{}" class="lg">refused</text>')
               .format(x + 16, y + 4))
    x += 80
    out.append(M('<line x1="{}" y1="{}" x2="{}" y2="{}" class="inc"/><text x="{}" y="{}" class="lg">incumbent'
                 '</text>').format(x, y, x + 16, y, x + 22, y + 4))
    return out


def svg_search(p: PointRow, baseline: dict[str, object], axis: str = "speed against the baseline (×)") -> Markup:
    """One point's search: per race (in path order) a stem from its incumbent's chained place to incumbent ×
    ratio, with the race's interval as a whisker (module docstring)."""
    path = p["path"]
    levels = chained_levels(baseline, path)
    moved = adopted(baseline, path)
    finals = [any(_same(r, f) for f in p["final"]) for r in path]
    vs = p["against_baseline"]
    n = max(len(path), 1)
    W, H, l, r_, t, b = 900, 320, 64, 16, 40, 72
    pw = W - l - r_
    col = pw / n
    ph = H - t - b
    ends = [1.0] + list(levels.values())
    whisk: list[float] = []
    for r in path:
        base = levels.get(_key(r["incumbent"]))
        x = _usable(r)
        if base is not None and x is not None:
            ends.append(base * x)
            whisk += [base * v for v in (r["low"], r["high"]) if v is not None and 0 < v < math.inf]
    lo, hi = min(ends), max(ends)
    pad = max(hi - lo, 0.1)
    lo = min([lo] + [w for w in whisk if w >= lo - pad])
    hi = max([hi] + [w for w in whisk if w <= hi + pad])
    yt = _nice_ticks(max(0.0, lo - 0.02), hi + 0.02)
    y0, y1 = yt[0], yt[-1]
    X: Callable[[float], float] = lambda i: l + col * (i + 0.5)  # noqa: E731
    Y: Callable[[float], float] = lambda v: t + ph - ph * (min(max(v, y0), y1) - y0) / (y1 - y0)  # noqa: E731
    label = f"the search at {p['point']} in flight: each race's ratio, chained from the baseline"
    parts = [M('<svg class="plot" viewBox="0 0 {} {}" width="{}" role="img" aria-label="{}"><title>{}</title>').format(
        W, H, W, label, label)]
    for i, f in enumerate(finals):  # the final check's races, shaded (a run of them as one block)
        if f and (i == 0 or not finals[i - 1]):
            k = next((j for j in range(i, len(finals)) if not finals[j]), len(finals))
            parts.append(M('<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" class="fin"><title>the final check'
                           '</title></rect>').format(l + col * i, t, col * (k - i), ph))
    parts += _axes(X, Y, [], yt, (l, t, pw, ph), tick_gap=(12, 4))
    parts.append(M('<line x1="{}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" class="base"/>'
                   '<text x="{:.1f}" y="{:.1f}" class="tick">baseline</text>').format(
        l, Y(1.0), l + pw, Y(1.0), l + 3, Y(1.0) - 3))
    incs = [levels.get(_key(r["incumbent"])) for r in path]
    for i, v in enumerate(incs):  # each race's incumbent, a shelf across its column
        if v is not None:
            parts.append(M('<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" class="inc"/>').format(
                X(i) - col / 2, Y(v), X(i) + col / 2, Y(v)))
    for i, r in enumerate(path):
        xi, base, c = X(i), incs[i], COLORS.get(r["outcome"], "#555")
        tip = f"race {i + 1}: {race_line(r)}" + (" — adopted" if moved[i] else "") + \
            (" — the answer's race against the baseline" if vs is not None and _same(r, vs) else "")
        parts.append(M('<text x="{:.1f}" y="{}" class="tick" text-anchor="middle">{}</text>'
                       '<text x="{:.1f}" y="{}" class="tick" text-anchor="end" transform="rotate(-40 {:.1f} {})">'
                       '{}</text>').format(xi, t + ph + 12, i + 1, xi + 3, t + ph + 22, xi + 3, t + ph + 22,
                                           _clip(_changed(r), 16)))
        x = _usable(r)
        if base is None:
            parts.append(M('<text x="{:.1f}" y="{}" class="note" text-anchor="middle">?<title>{} (its incumbent is '
                           'not placed: no race chains it to the baseline)</title></text>').format(xi, t + 12, tip))
        elif x is None:  # refused (or no ratio): a cross at the incumbent, never a stem
            parts.append(_cross(xi, Y(base), COLORS["refused"] if r["outcome"] == "refused" else c, tip))
        else:
            end = base * x
            lo_r, hi_r = r["low"], r["high"]
            w_lo = base * lo_r if lo_r is not None and lo_r > 0 else y0
            w_hi = base * hi_r if hi_r is not None and hi_r < math.inf else y1
            dash = M(' stroke-dasharray="4 3"') if r["outcome"] == "undecided" else ""
            parts.append(M('<g><title>{}</title><line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" '
                           'class="whisk"/><line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" '
                           'stroke-width="{}"{}/><circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}" stroke="{}" '
                           'stroke-width="1.5"/></g>').format(
                tip, xi, Y(w_lo), xi, Y(w_hi), c, xi, Y(base), xi, Y(end), c, 3 if moved[i] else 1.6, dash,
                xi, Y(end), 4.5 if moved[i] else 3.5, c if moved[i] else "#fff", c))
    parts += _legend(l, 14)
    parts.append(M('<text x="{:.1f}" y="{}" class="axl" text-anchor="middle">race, in the order run (its candidate'
                   '\'s change below; shaded: the final check)</text>'
                   '<text x="14" y="{:.1f}" class="axl" text-anchor="middle" transform="rotate(-90 14 {:.1f})">'
                   '{}</text></svg>').format(
        l + pw / 2, H - 4, t + ph / 2, t + ph / 2, axis))
    return Markup("").join(parts)


# ---------------------------------------------------------------- the page


class Cell(TypedDict):
    """A table cell: its text, its CSS classes, and a link (relative) where it has one."""

    text: str
    cls: str
    href: Optional[str]


class RaceView(TypedDict):
    """One race as the table shows it."""

    cls: str
    cells: list[Cell]


class PointView(TypedDict):
    """One operating point's section."""

    anchor: str
    title: str
    where: str
    lines: list[str]
    launch: str
    svg: Markup
    races: list[RaceView]


_PATH_LINE = re.compile(r"^ {2}\d+\. | {5}")


def _cell(text: str, cls: str = "", href: Optional[str] = None) -> Cell:
    return {"text": text, "cls": cls, "href": href}


def _races(p: PointRow, baseline: dict[str, object], out: Optional[Path]) -> list[RaceView]:
    levels = chained_levels(baseline, p["path"])
    moved = adopted(baseline, p["path"])
    vs = p["against_baseline"]
    rows: list[RaceView] = []
    for i, r in enumerate(p["path"]):
        base, x = levels.get(_key(r["incumbent"])), _usable(r)
        notes = ["adopted"] if moved[i] else []
        notes += ["final check"] if any(_same(r, f) for f in p["final"]) else []
        notes += ["the answer's race against the baseline"] if vs is not None and _same(r, vs) else []
        refused = r["outcome"] == "refused"
        outcome = OUTCOME_WORDS.get(r["outcome"], r["outcome"])
        link = report_link(r["run_dir"], out)
        rows.append({"cls": "refused-row" if refused else ("adopted" if moved[i] else ""), "cells": [
            _cell(str(i + 1), "num"), _cell(config_words(r["candidate"].items()), "cfg"),
            _cell(config_words(r["incumbent"].items()), "cfg"),
            _cell(outcome, "refused" if refused else f"o-{r['outcome']}"),
            _cell(_interval(r), "num" + (" struck" if refused and r["ratio"] is not None else "")),
            _cell("—" if base is None or x is None else f"{base * x:.2f}x", "num"),
            _cell(str(r["repeats"]), "num"), _cell(f"{r['engine_s']:,.0f}", "num"),
            _cell("; ".join(notes) + ("; " if notes and r["reason"] else "") + (r["reason"] or ""),
                  "reason" if refused else ""),
            _cell("report" if link else "—", "", link)]})
    return rows


def _point(p: PointRow, summary: TuneSummary, out: Optional[Path]) -> PointView:
    lines = point_lines(p, summary["confidence"], summary["objective"])
    launch = next((x.split("launch: ", 1)[1] for x in lines if x.startswith("  launch: ")), p["command"])
    body = [x.strip() for x in lines[1:] if not (_PATH_LINE.match(x) or x.startswith(("  final check:", "  launch: ")))]
    where = f"at {p['point']} request{'s' * (p['point'] != 1)} in flight"
    return {"anchor": f"point-{p['point']}", "title": lines[0], "where": where, "lines": body, "launch": launch,
            "svg": svg_search(p, summary["baseline"], "GPU-hours a turn, baseline's / its (×)"
                              if summary["objective"] == "gpu_hours" else "speed against the baseline (×)"),
            "races": _races(p, summary["baseline"], out)}


_STYLE_MORE = """
svg .inc { stroke: #555; stroke-width: 1.2; }
svg .base { stroke: #333; stroke-width: 1; stroke-dasharray: 2 3; }
svg .whisk { stroke-width: 7; stroke-opacity: .28; stroke-linecap: round; }
svg .fin { fill: #eef4fb; }
svg .refused line { stroke-width: 2.4; }
tr.adopted td:first-child { border-left: 4px solid #2e8b3a; }
td.o-better { color: #1f6b29; font-weight: 600; }
td.cfg { white-space: nowrap; }
td.struck { text-decoration: line-through; color: var(--refused-fg); }
.answer { background: #f6f9f6; border: 1px solid #cfe0cf; border-left: 4px solid #2e8b3a; padding: 8px 12px;
          border-radius: 4px; }
.answer h3 { margin: 0 0 .3em; font-size: 1.1em; }
.answer code { word-break: break-all; }
"""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{{ title }}</title>
<style>{{ style }}</style>
</head>
<body>
<header>
<h1>{{ title }}</h1>
<p class="lede">Computed by <code>leverbench tune</code> from its races' ledgers (<code>tune.json</code>); each race
is an ordinary run whose report is linked below. This file is self-contained: it fetches nothing.</p>
<dl class="facts">{% for k, v in facts %}<dt>{{ k }}</dt><dd>{{ v }}</dd>{% endfor %}</dl>
<nav class="toc">{% for p in points %}<a href="#{{ p.anchor }}">{{ p.title }}</a>{% endfor %}</nav>
</header>
{% for p in points %}
<section id="{{ p.anchor }}">
<h2>{{ p.title }}</h2>
<div class="answer">
{% for x in p.lines %}<p>{{ x }}</p>
{% endfor %}
<p>launch: <code>{{ p.launch }}</code></p>
</div>
<figure>{{ p.svg }}<figcaption>Each column is one race, in the order run. A stem goes from the race's incumbent to a
circle for the candidate, at incumbent × the race's ratio ({{ ratio_of }}); the pale whisker is the
race's own {{ confidence }} interval. A configuration's height is its {{ height_of }} against the baseline by
<strong>chaining</strong>: the baseline at 1, each candidate at its incumbent's height × the race's ratio (first
placement kept). Chaining multiplies point estimates, so the errors of the races along a chain add up and no
interval is claimed for a chained height; the race of the baseline against the winner, drawn from 1, is the direct
measurement. Thick stems with a filled circle moved the incumbent (adopted); a red ✕ is a refused race, which never
makes a configuration win. Hover a race for its line.</figcaption></figure>
<div class="tw">
<table>
<caption>The races {{ p.where }}</caption>
<thead><tr>{% for h in headers %}<th scope="col">{{ h }}</th>{% endfor %}</tr></thead>
<tbody>
{% for r in p.races %}
<tr{% if r.cls %} class="{{ r.cls }}"{% endif %}>{% for c in r.cells %}<td{% if c.cls %} class="{{ c.cls }}"{% endif %}>
{%- if c.href %}<a href="{{ c.href }}">{{ c.text }}</a>{% else %}{{ c.text }}{% endif %}</td>{% endfor %}</tr>
{% endfor %}
</tbody>
</table>
</div>
</section>
{% endfor %}
</body>
</html>
"""

HEADERS = ["race", "candidate", "against (incumbent)", "outcome", "ratio [interval]", "× baseline, chained",
           "repeats", "engine-s", "notes", "its run"]


def _facts(summary: TuneSummary) -> list[tuple[str, str]]:
    budget = summary["budget_engine_s"]
    facts = [("tune file", summary["file"]),
             ("knobs", "; ".join(f"{k}: {' '.join(str(v) for v in vs)}" for k, vs in summary["knobs"].items())),
             ("baseline", config_words(summary["baseline"].items()))]
    if summary["exclude"]:
        facts.append(("excluded", "; ".join(config_words(e.items()) for e in summary["exclude"])))
    facts += [("least effect", f"{summary['min_effect']:g}x at {summary['confidence']:.0%} confidence"),
              ("budget", f"{budget:,.0f} engine-s" if budget is not None else "none"),
              ("engine-s spent", f"{summary['engine_s']:,.0f} in all")]
    return facts


def render_tune_html(summary: TuneSummary, out: Optional[Path] = None) -> str:
    """``tune.html``: the answer, the plot and the races per operating point.  *out*: the directory the page is
    written to, to link each race's ``report.html`` relative to it (None: no links)."""
    from .html import _STYLE, CSP, _env  # noqa: PLC0415 (jinja2 on use)

    return _env.from_string(_PAGE).render(
        csp=CSP, style=Markup(_STYLE + _STYLE_MORE), title=f"leverbench tune: {summary['file']}",
        facts=_facts(summary), points=[_point(p, summary, out) for p in summary["points"]], headers=HEADERS,
        confidence=f"{summary['confidence']:.0%}",
        ratio_of="incumbent GPU-hours a turn / candidate's" if summary["objective"] == "gpu_hours"
        else "incumbent time / candidate time",
        height_of="saving in GPU-hours a turn" if summary["objective"] == "gpu_hours" else "speed")
