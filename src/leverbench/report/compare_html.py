"""``leverbench compare --format html``: the comparison as one self-contained page, with the history plots.

The page says what the terminal says, in its order (the words and tables of :mod:`.compare`): the baseline, the
threshold, the confidence and the exit code; per later run what changed (before any number), the machine's speed, the
arms and cases not compared, the arms', levers' and cells' figures, the lines that say what got slower; the history.

**The history**: the runs, the baseline among them, in the order of their ``started_at``.  Per arm, its ratio to the
baseline (the baseline at 1x), each later run's point with its interval as a whisker, coloured by its verdict, the
band [1/t, t] shaded, the ratio corrected for the machine beside it (hollow) where it was.  Per lever (the baseline's
lever, arm, vs), its multiplier in each run with that run's interval (the baseline's from the first comparison that
measured it), coloured by the verdict on the ratio of the multipliers.  Log vertical axes.  Each point's ``<title>``
(its hover) names the run, its start, its figures and the conditions changed for that arm or lever.

Escaping and the Content-Security-Policy (no fetch) are the run report's (:mod:`.html`, :mod:`.svg`); the plot is
drawn by :mod:`.svg_history`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import PurePath
from typing import TYPE_CHECKING

from markupsafe import Markup

from .compare import (
    arm_table,
    cases_text,
    cell_table,
    closing,
    gate_line,
    lever_table,
    lines,
    ratio_text,
    shown,
    verdict_words,
)
from .svg_history import Mark, svg_history
from .table import Table

if TYPE_CHECKING:
    from ..schema.compare_rows import ChangedRow, CompareResult, LeverRow, RunComparison, RunInfo
    from .html import TableView

__all__ = ["render_html"]

# ---------------------------------------------------------------- the runs and their conditions


def ordered(result: CompareResult) -> list[tuple[RunInfo, RunComparison | None]]:
    """Every run, the baseline (with None) among the later ones, in the order of their ``started_at`` (a run
    without one last, in the order given)."""
    runs: list[tuple[RunInfo, RunComparison | None]] = [(result["baseline"], None)]
    runs += [(c["later"], c) for c in result["comparisons"]]
    start = [_instant(r["started_at"]) for r, _ in runs]
    return [runs[i] for i in sorted(range(len(runs)), key=lambda i: (start[i] is None, start[i] or 0.0, i))]


def _instant(started_at: str | None) -> float | None:
    """A run's start as seconds since the epoch (ISO 8601 with its offset; without one, read as UTC), or None."""
    if not started_at:
        return None
    try:
        t = datetime.fromisoformat(started_at)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


def conditions(c: RunComparison, arms: Sequence[str]) -> list[str]:
    """What changed between the baseline and *c* for *arms* (the run, the host, those arms): ``what: base → later``."""
    rows: list[ChangedRow] = [r for r in c["changed"] if r["scope"] != "arm" or r["arm"] in arms]
    return [("host: " if r["scope"] == "host" else f"arm {r['arm']}: " if r["scope"] == "arm" else "")
            + f"{r['what']}: {shown(r['baseline'])} → {shown(r['later'])}" for r in rows]


def _tip(run: RunInfo, figures: list[str], changed: list[str] | None) -> str:
    head = [run["path"], f"started {run['started_at'] or 'unknown'}", *figures]
    if changed is None:
        return "\n".join(head)
    return "\n".join(head + (["changed:", *(f"  {x}" for x in changed)] if changed
                             else ["changed: nothing the ledgers record"]))


def arm_marks(result: CompareResult, arm: str) -> list[list[Mark]]:
    """Per run (in :func:`ordered`'s order), the arm's points: the baseline at 1x, each later run's ratio (and the
    corrected one, hollow, where it was corrected)."""

    def one(run: RunInfo, c: RunComparison | None) -> list[Mark]:
        if c is None:
            return [Mark(1.0, None, None, "baseline", _tip(run, [f"arm {arm}: the baseline (1x)"], None))]
        r = next((x for x in c["arm_ratios"] if x["arm"] == arm), None)
        if r is None:
            return []
        name = arm if r["later_arm"] == arm else f"{arm} → {r['later_arm']}"
        said = [f"arm {name}: {ratio_text(r['ratio'], r['low'], r['high'])} {verdict_words(r['verdict'])}"
                + (f" ({r['note']})" if r["note"] else ""), f"cases: {cases_text(r)}"]
        fixed = r["corrected"] and r["corrected_ratio"] is not None
        fix = (r["corrected_ratio"], r["corrected_low"], r["corrected_high"])
        said += ([f"corrected for the machine: {ratio_text(*fix)} {verdict_words(r['corrected_verdict'])}"]
                 if fixed else [])
        tip = _tip(run, said, conditions(c, [arm]))
        return [Mark(r["ratio"], r["low"], r["high"], r["verdict"], tip)] + \
            ([Mark(*fix, r["corrected_verdict"] or "undecided", "corrected for the machine\n" + tip, hollow=True)]
             if fixed else [])

    return [one(run, c) for run, c in ordered(result)]


LeverKey = tuple[str, str, str]


def lever_keys(result: CompareResult) -> list[LeverKey]:
    """Every lever measured in some comparison, as (lever, arm, vs) of the baseline's names, in first-seen order."""
    return list(dict.fromkeys((row["lever"], row["arm"], row["vs"]) for c in result["comparisons"]
                              for row in c.get("levers", []) if row["compared"]))


def _lever(c: RunComparison, key: LeverKey) -> LeverRow | None:
    return next((x for x in c.get("levers", []) if (x["lever"], x["arm"], x["vs"]) == key), None)


def lever_marks(result: CompareResult, key: LeverKey) -> list[list[Mark]]:
    """Per run (in :func:`ordered`'s order), the lever's multiplier: the baseline's (from the first comparison that
    measured it) and each later run's, with its run's interval."""
    lever, arm, vs = key
    measured = [row for c in result["comparisons"] if (row := _lever(c, key)) is not None
                and row["multiplier_baseline"] is not None]
    first = next((row for row in measured if not row["refused"]), measured[0] if measured else None)

    def one(run: RunInfo, c: RunComparison | None) -> list[Mark]:
        if c is None:
            if first is None:
                return []
            b = (first["multiplier_baseline"], first["multiplier_baseline_low"], first["multiplier_baseline_high"])
            return [Mark(*b, "baseline", _tip(run, [f"{lever}: {arm} vs {vs}, the baseline's multiplier: "
                                                    + ratio_text(*b)], None))]
        r = _lever(c, key)
        if r is None or not r["compared"]:
            return []
        pair = f"{arm} vs {vs}" + ("" if (r["later_arm"], r["later_vs"]) == (arm, vs)
                                   else f" (later: {r['later_arm']} vs {r['later_vs']})")
        m = (r["multiplier_later"], r["multiplier_later_low"], r["multiplier_later_high"])
        said = [f"{lever}: {pair}, multiplier {ratio_text(*m)}",
                f"against the baseline's: {ratio_text(r['ratio'], r['low'], r['high'])} {verdict_words(r['verdict'])}"
                + (f": {r['reason']}" if r["reason"] else "") + (f" ({r['note']})" if r["note"] else ""),
                f"cases: {cases_text(r)}"]
        return [Mark(*m, r["verdict"], _tip(run, said, conditions(c, [arm, vs])))]

    return [one(run, c) for run, c in ordered(result)]


# ---------------------------------------------------------------- the page


def _labels(runs: Sequence[tuple[RunInfo, RunComparison | None]]) -> list[tuple[str, str]]:
    """Each run's name under its column (its directory; with its parent where two share a name) and its start."""
    tails = [PurePath(r["path"]).name or r["path"] for r, _ in runs]
    twice = len(set(tails)) < len(tails)
    return [("/".join(PurePath(r["path"]).parts[-2:]) if twice else tail,
             (r["started_at"] or "start unknown")[:19].replace("T", " ")) for (r, _), tail in zip(runs, tails)]


def _full(v: object) -> str:
    return "(none)" if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)


def changed_table(c: RunComparison, i: int) -> Table:
    rows = [["run" if r["scope"] == "run" else "host" if r["scope"] == "host" else f"arm {r['arm']}", r["what"],
             _full(r["baseline"]), _full(r["later"])] for r in c["changed"]]
    return Table(f"compare_changed_{i}", "What changed between the runs", ["where", "what", "baseline", "later"], rows)


_VERDICT_CLASS = (("slower", "v-bad"), ("pays less", "v-bad"), ("faster", "v-good"), ("pays more", "v-good"),
                  ("undecided", "v-undecided"), ("refused", "refused"))


def _view(t: Table) -> TableView:
    """A table as the template draws it (:func:`.html._table_view`), each verdict cell classed by its verdict."""
    from .html import _table_view  # noqa: PLC0415 (jinja2 on use)

    view = _table_view(t)
    cols = [k for k, h in enumerate(t.headers) if "verdict" in h or h == "corrected for the machine"]
    for row in view["rows"]:
        for k in cols:
            cell = row["cells"][k]
            text = re.sub(r"^(—|\S+x)( \[[^\]]*\])? ", "", cell["text"])  # a corrected cell: "0.998x [..] same"
            cls = next((c for word, c in _VERDICT_CLASS if text.startswith(word)), "")
            cell["cls"] = " ".join(x for x in (cell["cls"], cls) if x)
    return view


def _exit_words(result: CompareResult) -> str:
    code = result["exit_code"]
    return f"{code}: " + ("nothing is shown slower than the threshold" if not code else "something is slower than "
                          "the threshold (the SLOWER lines say what)" if result["slower"] else
                          "--strict, and a row is undecided beyond the threshold or refused")


def _run_facts(run: RunInfo) -> list[tuple[str, str]]:
    facts = [("run", run["path"]), ("experiment", run["experiment_name"]),
             ("started", run["started_at"] or "not recorded"), ("run id", run["run_id"] or "—"),
             ("tool", f"leverbench {run['tool_version'] or '?'} (ledger {run['schema']})"),
             ("arms", ", ".join(run["arms"])), ("cases", ", ".join(run["cases"]))]
    return facts + [("reading its ledger", w) for w in run["warnings"]]


def _section(result: CompareResult, c: RunComparison, i: int) -> dict[str, object]:
    words = lines(c, result["baseline"]["path"], result["correct_machine"])
    at = next((k for k, w in enumerate(words) if w.startswith("Machine speed: ")), len(words))
    gate = gate_line(c, result["correct_machine"])
    arms, cells, levers = arm_table(c), cell_table(c), lever_table(c)
    said = [("SLOWER", x, "v-bad") for x in c["slower"]] + \
        [("undecided beyond the threshold", x, "v-undecided") for x in c["undecided"]] + \
        [("refused", x, "refused") for x in c["refused"]]
    return {"anchor": f"run-{i + 1}", "head": words[0], "facts": _run_facts(c["later"]),
            "changed": _view(changed_table(c, i)) if c["changed"] else None,
            "machine": c["machine"]["text"], "notes": c["machine"]["notes"] + ([gate] if gate else []),
            "matches": [w.strip() for w in words[at + 1 + len(c["machine"]["notes"]) + (gate is not None):]],
            "arms": _view(replace(arms, key=f"{arms.key}_{i}")), "cells": _view(replace(cells, key=f"{cells.key}_{i}")),
            "levers": _view(replace(levers, key=f"{levers.key}_{i}")) if levers else None, "said": said}


def _plots(result: CompareResult) -> list[dict[str, object]]:
    runs = ordered(result)
    labels = _labels(runs)
    t, conf = result["threshold"], f"{result['confidence']:.1%}"
    arms = list(dict.fromkeys([*result["baseline"]["arms"], *(r["arm"] for c in result["comparisons"]
                                                              for r in c["arm_ratios"])]))
    out: list[dict[str, object]] = []
    for arm in arms:
        cols = arm_marks(result, arm)
        if not any(m.key != "baseline" for col in cols for m in col):
            continue
        out.append({"title": f"arm {arm}",
                    "svg": svg_history(f"arm {arm}: later / baseline, per run", labels, cols, axis="later / baseline",
                                       band=(1 / t, t)),
                    "caption": f"Arm {arm}: each later run's geometric mean over its compared cases of the ratio of "
                               f"its turn times to the baseline's, the whisker its {conf} interval; shaded: within the "
                               f"threshold [{1 / t:.3f}, {t:.3f}]"
                               + ("; a diamond: corrected for the machine." if any(m.hollow for x in cols for m in x)
                                  else ".")})
    for key in lever_keys(result):
        lever, arm, vs = key
        cols = lever_marks(result, key)
        base = next((m.value for col in cols for m in col if m.key == "baseline"), None)
        out.append({"title": f"lever {lever}: {arm} vs {vs}",
                    "svg": svg_history(f"{lever}: {arm} vs {vs}, its multiplier per run", labels, cols,
                                       axis="multiplier (> 1: pays)",
                                       band=(base / t, base * t) if base else None,
                                       ref=(base, "the baseline's") if base else None),
                    "caption": f"Lever {lever} ({arm} against {vs}): its multiplier in each run (reference time / "
                               f"arm time, from the run's paired turns) with its {result['confidence']:.1%} interval "
                               "(the comparison's confidence, not the run's own report's); the colour is the verdict "
                               "on the ratio of the later multiplier to the baseline's; shaded: within the threshold "
                               "of the baseline's."})
    return out


_STYLE_MORE = """
svg .band { fill: #eef4fb; } svg .whisk { stroke-width: 1.8; } svg .trend { fill: none; stroke: #b8bec6; }
svg .one { stroke: #333; stroke-dasharray: 2 3; } svg .ref { stroke: #1d1d1f; stroke-dasharray: 6 3; }
.v-bad { color: #b00020; font-weight: 600; } .v-good { color: #1f6b29; font-weight: 600; }
.v-undecided { color: #a15c00; } p.refused { color: var(--refused-fg); }
"""

_PAGE = """{% macro table(t) %}
<div class="tw"><table id="t-{{ t.key }}"><caption>{{ t.title }}</caption>
<thead><tr>{% for h in t.headers %}<th scope="col">{{ h }}</th>{% endfor %}</tr></thead><tbody>
{% for r in t.rows %}
<tr{% if r.cls %} class="{{ r.cls }}"{% endif %}>{% for c in r.cells %}<td{% if c.cls %} class="{{ c.cls }}"{% endif %}>
{{- c.text }}</td>{% endfor %}</tr>
{% endfor %}
</tbody></table></div>
{% endmacro %}
<!doctype html>
<html lang="en"><head>
<meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="referrer" content="no-referrer"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>{{ title }}</title><style>{{ style }}</style></head>
<body>
<header><h1>{{ title }}</h1>
<p class="lede">Computed by <code>leverbench compare</code> from the runs' ledgers. Every ratio is the later run's
turn time over the baseline's: above 1x the later run is slower. This file is self-contained: it fetches nothing.</p>
<dl class="facts">{% for k, v in facts %}<dt>{{ k }}</dt><dd>{{ v }}</dd>{% endfor %}</dl>
<nav class="toc">{% for s in sections %}<a href="#{{ s.anchor }}">{{ s.facts[0][1] }}</a>{% endfor %}
<a href="#verdict">verdict</a><a href="#history">history</a></nav>
</header>
{% for s in sections %}
<section id="{{ s.anchor }}"><h2>{{ s.head }}</h2>
<dl class="facts">{% for k, v in s.facts %}<dt>{{ k }}</dt><dd>{{ v }}</dd>{% endfor %}</dl>
<h3>What changed</h3>
{% if s.changed %}{{ table(s.changed) }}{% else %}
<p class="none">Nothing the ledgers record (conditions, knobs, host, tool, schema).</p>{% endif %}
<h3>The machine's speed</h3><p>{{ s.machine }}</p>
{% for n in s.notes %}<p class="legend-note">{{ n }}</p>{% endfor %}
{% if s.matches %}<h3>Arms and cases</h3>
<ul>{% for x in s.matches %}<li>{{ x }}</li>{% endfor %}</ul>{% endif %}
<h3>The figures</h3>
{{ table(s.arms) }}
{% if s.levers %}{{ table(s.levers) }}{% endif %}
{{ table(s.cells) }}
{% for word, x, cls in s.said %}<p class="{{ cls }}">{{ word }}: {{ x }}</p>{% endfor %}
</section>
{% endfor %}
<section id="verdict"><h2>Verdict</h2>
{% for x in closing %}<p>{{ x }}</p>{% endfor %}</section>
<section id="history"><h2>History</h2>
<p>The runs in the order they started, the baseline among them. Per arm its ratio to the baseline, per lever its
multiplier, each point with its interval as a whisker; hover a point for its run, its figures and the conditions that
changed between it and the baseline. The vertical axes are logarithmic.</p>
{% for p in plots %}<h3>{{ p.title }}</h3>
<figure>{{ p.svg }}<figcaption>{{ p.caption }}</figcaption></figure>
{% endfor %}
{% if not levers %}<p class="none">No lever was compared across these runs.</p>{% endif %}
</section>
</body></html>
"""


def render_html(result: CompareResult) -> str:
    """The comparison as one self-contained HTML page (module docstring)."""
    from .html import _STYLE, CSP, _env  # noqa: PLC0415 (jinja2 on use)

    base, t = result["baseline"], result["threshold"]
    facts = [("baseline", base["path"]), *_run_facts(base)[1:],
             ("threshold", f"{t:g}x: slower = above it with the whole interval above 1x; faster = below "
                           f"{1 / t:.3f}x with the whole interval below 1x"),
             ("confidence", f"{result['confidence']:.1%} each interval (together 95 %)"),
             ("exit code follows", ("the verdicts corrected for the machine (--correct-machine)"
                                    if result["correct_machine"] else "the measured verdicts")
              + ("; --strict: also a row undecided beyond the threshold or refused" if result["strict"] else "")),
             ("exit code", _exit_words(result))]
    return _env.from_string(_PAGE).render(
        csp=CSP, style=Markup(_STYLE + _STYLE_MORE),
        title=f"leverbench compare: {base['path']} (experiment {base['experiment_name']})", facts=facts,
        sections=[_section(result, c, i) for i, c in enumerate(result["comparisons"])], plots=_plots(result),
        levers=lever_keys(result),  # the closing lines less each run's, said in its section
        closing=[x for x in closing(result) if not x.startswith(("SLOWER: ", "UNDECIDED: ", "REFUSED: "))])
