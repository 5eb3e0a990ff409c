"""``report.html`` and the side-by-side replay page: each one self-contained file.

Both pages open offline: styles, the one script and every plot are inline, and
a Content-Security-Policy meta tag forbids the page any fetch at all
(``default-src 'none'``); the only script allowed to run is the page's own,
named by its SHA-256 hash, so even markup that slipped past escaping could not
execute.  Plots are inline SVG (:mod:`.svg`) drawn from ``summary.json``
numbers; the tables are the same :mod:`leverbench.report.tables` the terminal
and Markdown reports use, so the three never disagree; the replay's data comes
from :mod:`.replay`.

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
import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup
from typing_extensions import TypedDict

from ..config.settings import RunSettings
from ..ledger.reader import Ledger
from ..schema.warning_kinds import warning_groups
from .first_screen import first_screen
from .jsonio import finite, number
from .load_levers import pair_sentence
from .replay import ReplayData, replay_choice, replay_data
from .svg import PHASE_COLORS, Bar, arm_colors, svg_hbars, svg_load, svg_scatter, svg_stacked_bars
from .svg_levers import svg_lever_load
from .table import Table
from .tables import all_tables

if TYPE_CHECKING:
    from ..ledger.rows import RunHeaderRow
    from ..schema.summary import Summary

__all__ = ["render_html", "render_replay", "replay_data", "script_json", "CSP", "TableView"]
# report/traffic.py's page also takes CSP, _STYLE, _env and _table_view from here.

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

#: Replay events embedded in report.html at most (a chunk is one event); past it, fewer repeats are embedded.
MAX_REPORT_EVENTS = 200_000


# ---------------------------------------------------------------- JSON for a script block


def script_json(obj: object) -> Markup:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&`` or ``'`` appears
    literally (each becomes a ``\\u00XX`` escape, which JSON.parse reads back unchanged), so no text can
    close the block or open a comment; non-ASCII is escaped too, so the block is plain ASCII."""
    text = json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    text = (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("'", "\\u0027"))
    return Markup(text)


# ---------------------------------------------------------------- tables with marks


_NUMERIC = re.compile(r"^[\s(]*[-+$]?[\d.,]+\s*(x|s|%|tok/s)?\)?$")


class CellView(TypedDict):
    """A table cell as the page's template draws it: its text and its CSS classes."""

    text: str
    cls: str


class RowView(TypedDict):
    """A table row as the template draws it: its CSS class and its cells."""

    cls: str
    cells: list[CellView]


class TableView(TypedDict):
    """A :class:`~.table.Table` as the template draws it, each cell with its CSS classes."""

    key: str
    title: str
    headers: list[str]
    rows: list[RowView]
    notes: list[str]


class ScatterView(TypedDict):
    """A case's regression scatters, one per arm."""

    case: str
    svgs: list[Markup]


class ReplayView(TypedDict):
    """The replay embedded in a page: its data (:func:`.replay.replay_data`) and the same as a script block's JSON."""

    json: Markup
    data: ReplayData


def _table_view(t: Table) -> TableView:
    """A Table with CSS classes: refused multipliers and fits (with their reason), failed checks, numbers."""
    heads = [h.lower() for h in t.headers]
    rows: list[RowView] = []
    for row in t.rows:
        refused_row = any(h == "citable" and x == "no" for h, x in zip(heads, row))
        refused_fit = "refused" in row
        cells: list[CellView] = []
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


def _shares_groups(summary: Summary) -> list[tuple[str, list[Bar]]]:
    arms = [a["name"] for a in summary["arms"]]
    by = {(r["arm"], r["case"]): r for r in summary.get("time_shares") or []}
    groups = []
    for case in summary["cases"]:
        rs: list[Bar] = []
        for a in arms:
            r = by.get((a, case))
            if r is None:
                continue
            rs.append({"arm": a, "total": number(r["turn_s"]),
                       "segments": [("prefill", number(r["prefill_s"])), ("decode", number(r["decode_s"])),
                                    ("other", number(r["other_s"]))]})
        if rs:
            groups.append((case, rs))
    return groups


def _scenario_groups(summary: Summary) -> list[tuple[str, list[Bar]]]:
    p = summary.get("projection")
    if not p:
        return []
    rs: list[Bar] = []
    for a in p["arms"]:
        if "refused" in a:
            rs.append({"arm": a["arm"], "note": f"refused: {a['refused']}"})
        elif a["total_s"] is None:
            rs.append({"arm": a["arm"], "note": "only one phase projected: "
                                                + (a.get("prefill_refused") or a.get("decode_refused") or "")})
        else:
            rs.append({"arm": a["arm"], "total": number(a["total_s"]),
                       "segments": [("prefill", number(a["prefill_s"])), ("decode", number(a["decode_s"]))]})
    return [(f"scenario: {p['input_tokens']:,} input, {p['output_tokens']:,} output tokens", rs)]


def _scatters(summary: Summary) -> list[ScatterView]:
    arms = [a["name"] for a in summary["arms"]]
    colors = arm_colors(arms)
    out: list[ScatterView] = []
    for case in summary["cases"]:
        ds = [d for d in summary.get("decomposition") or [] if d["case"] == case and d.get("points")]
        if not ds:
            continue
        xs = [v for d in ds for v in d.get("x") or [] if number(v) is not None]
        ys = [v for d in ds for v in d.get("y") or [] if number(v) is not None]
        xmax, ymax = max(xs + [1]), max(ys + [1e-3])
        for d in ds:
            intercept = number(d.get("intercept_s"))
            if not d.get("refused") and intercept is not None:
                ymax = max(ymax, intercept)
        svgs = [svg_scatter(d, colors.get(d["arm"], "#555"), xmax, ymax)
                for d in sorted(ds, key=lambda d: arms.index(d["arm"]) if d["arm"] in arms else 99)]
        out.append({"case": case, "svgs": svgs})
    return out


def _run_facts(summary: Summary) -> list[tuple[str, str]]:
    run = summary["run"]
    host = run.get("host") or {}
    facts = [("run", f"{run.get('name')} ({run.get('run_id')})"), ("started", str(run.get("started_at"))),
             ("host", f"{host.get('cpu', '?')}, {host.get('cores', '?')} cores, {host.get('os', '?')}"),
             ("schedule",
              f"{run.get('repeats')} repeats, {run.get('order')} order, concurrency {run.get('concurrency')}"),
             ("calls", f"{run.get('calls')} model calls, {run.get('failed_calls')} failed"),
             ("baseline", str(summary["baseline"])), ("tool", f"leverbench {run.get('tool_version')}")]
    if run.get("resumed"):
        facts.append(("resumed", f"{run['resumed']} time(s)"))
    return facts


def render_html(summary: Summary, ledger: Ledger[RunHeaderRow] | None = None) -> str:
    """``report.html``: the run's conditions, tables, plots, warnings and (with the ledger) the replay.

    ``summary`` is the ``leverbench.summary/1`` dict; ``ledger`` is the run's ledger, needed only for the
    side-by-side replay (without it the page says where to get one).
    """
    tabs: defaultdict[str, TableView | None] = defaultdict(lambda: None)  # an absent table renders as nothing
    tabs.update({t.key: _table_view(t) for t in all_tables(summary)})
    arms = [a["name"] for a in summary["arms"]]
    load = [st for st in summary.get("load") or [] if isinstance(st, dict)]
    cost = summary.get("cost") or []
    cost_svg = None
    if cost:
        cost_svg = svg_hbars([(c["arm"], number(c["gpu_hours_per_1000_turns"]),
                               f"{c['gpu_hours_per_1000_turns']:.2f} GPU-h") for c in cost],
                             label="GPU-hours per 1000 turns", axis="GPU-hours per 1000 turns")
    shares = _shares_groups(summary)
    scen = _scenario_groups(summary)
    replay: ReplayView | None = None
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
        cost_svg=cost_svg, warnings=warning_groups(summary), replay=replay, has_ledger=ledger is not None,
        lever_load=[{"text": pair_sentence(r), "svg": svg_lever_load(r, summary.get("capacity") or [])}
                    for r in summary.get("load_levers") or []],
        phase_colors=PHASE_COLORS, answer=first_screen(summary, full_hint=None).lines(width=1000))
    return page


# ---------------------------------------------------------------- the replay page


def render_replay(ledger: Ledger[RunHeaderRow], case: str, arms: list[str], repeat: int = 0) -> str:
    """One HTML page: the chosen arms' answers for one case and repeat, streaming side by side at their
    recorded chunk times.  Raises :class:`BadInput` naming the valid values for an unknown case, arm or repeat
    (:func:`~.replay.replay_choice`).
    """
    data = replay_choice(ledger, case, arms, repeat)
    name = RunSettings.of_header(ledger.header["config"], ledger.path).name or "run"
    return _env.get_template("replay.html.j2").render(
        csp=CSP, style=Markup(_STYLE), script=Markup(_SCRIPT),
        title=f"leverbench replay: {name} · {case} · repeat {repeat}", run_name=name,
        run_id=ledger.header.get("run_id"), case=case, repeat=repeat, arms=arms,
        replay={"json": script_json(finite(data)), "data": data})

