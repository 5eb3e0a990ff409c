"""The ledger as analysis sees it: which records count.

A call counts when it belongs to a counted turn (its ``turn_id`` has the
counted ``turn`` record) or is a counted probe or sentinel.  Each unit (a
turn: arm, case, repeat; a probe or sentinel: also its length and position)
counts one attempt: its first successful one, or, when every attempt failed,
its latest — as the runner decides what a resumed run skips (a unit with a
success) and re-runs (a unit whose attempts all failed).  The failed attempts
a re-run leaves behind stay in the ledger, superseded, and their number is
reported.  (A probe's or sentinel's attempt is its call with any retried
tries before it.)  Calls of a turn that an interrupted run cut off are not
counted (the resumed run re-ran that turn), and the number left out is
reported.

The counted calls, the probes and the turns are also held as columns
(:class:`CallTable`, :class:`TurnTable`: numpy arrays, one row per record in
ledger order), built once per summary, so that every metric is a vectorized
group-by over (arm, case) rather than a pass over dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Iterable, Mapping, cast

import numpy as np

from ...config.settings import RunSettings
from ...ledger.reader import Columns, Ledger
from ...ledger.records import CALL_FLAGS, CALL_NUMBERS, CALL_TIMINGS, TURN_FLAGS, TURN_NUMBERS
from ...schema.warning_kinds import RunWarning, WarningKind
from .knobs import all_arm_knobs, arm_knobs

if TYPE_CHECKING:
    from ...json_types import JSONValue
    from ...ledger.rows import CallRow, HeaderArmRow, MetricsRow, RunConfigRow, RunHeaderRow


#: The columns of :class:`CallTable`: ``arm``, ``case`` (indices into ``Dataset.arm_names`` /
#: ``case_names``), ``turn`` (index into ``Dataset.turn``, −1 for a call of no counted turn, e.g. a
#: probe), ``ok`` (error is null), ``has_timings`` (the record carries llama.cpp's ``timings``), ``output``
#: (a code per distinct ``output_sha256`` within one table: equal codes, equal answers; −1: none), then
#: one per column the call record declares (:mod:`leverbench.ledger.records`): its flags (bool: the
#: record says so), its numbers and the numbers of ``timings`` (float, NaN where the record lacks the
#: field or has null).
CALL_TABLE_COLUMNS = ("arm", "case", "turn", "ok", "has_timings", "output", *CALL_FLAGS, *CALL_NUMBERS,
                      *CALL_TIMINGS)


@dataclass(slots=True)
class CallTable:
    """Call records as columns (numpy arrays), one row per record in ledger order: :data:`CALL_TABLE_COLUMNS`
    (the fields are written out so that a type checker knows them; the import checks they are those columns)."""

    arm: np.ndarray
    case: np.ndarray
    turn: np.ndarray
    ok: np.ndarray
    has_timings: np.ndarray
    output: np.ndarray
    empty_answer: np.ndarray
    retried: np.ndarray
    step: np.ndarray
    t_send: np.ndarray
    connect_s: np.ndarray
    send_s: np.ndarray
    ttft_s: np.ndarray
    t_first_answer_s: np.ndarray
    latency_s: np.ndarray
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    cached_tokens: np.ndarray
    reasoning_tokens: np.ndarray
    content_chars: np.ndarray
    reasoning_chars: np.ndarray
    reasoning_chunks: np.ndarray
    answer_chunks: np.ndarray
    tools_sent: np.ndarray
    prompt_n: np.ndarray
    prompt_ms: np.ndarray
    predicted_n: np.ndarray
    predicted_ms: np.ndarray
    cache_n: np.ndarray
    draft_n: np.ndarray
    draft_n_accepted: np.ndarray

    def __len__(self) -> int:
        return len(self.arm)

    def take(self, rows: np.ndarray) -> CallTable:
        """The rows selected by a boolean mask or an index array."""
        return CallTable(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def cached(self) -> np.ndarray:
        """Cached prompt tokens: usage ``cached_tokens``, else llama.cpp ``timings.cache_n`` (NaN: neither)."""
        return np.where(np.isnan(self.cached_tokens), self.cache_n, self.cached_tokens)


#: The columns of :class:`TurnTable`: ``arm``, ``case`` as in :class:`CallTable`, ``ok`` (error is null),
#: then the turn record's flags and numbers (:mod:`leverbench.ledger.records`).
TURN_TABLE_COLUMNS = ("arm", "case", "ok", *TURN_FLAGS, *TURN_NUMBERS)


@dataclass(slots=True)
class TurnTable:
    """Turn records as columns, one row per record in ledger order: :data:`TURN_TABLE_COLUMNS` (written out, and
    checked at import, as :class:`CallTable`'s)."""

    arm: np.ndarray
    case: np.ndarray
    ok: np.ndarray
    step_limit: np.ndarray
    repeat: np.ndarray
    t_start: np.ndarray
    turn_s: np.ndarray
    model_s: np.ndarray
    tool_s: np.ndarray
    retried_s: np.ndarray
    output_tokens: np.ndarray
    prompt_tokens: np.ndarray
    reasoning_tokens: np.ndarray
    companion_failed: np.ndarray  # NaN: a turn without companions (ledger v6: runner.companions)

    def __len__(self) -> int:
        return len(self.arm)


for _table, _columns in ((CallTable, CALL_TABLE_COLUMNS), (TurnTable, TURN_TABLE_COLUMNS)):
    if tuple(f.name for f in fields(_table)) != _columns:  # the ledger's columns changed: write them out here
        raise ImportError(f"{_table.__name__}'s fields are not the columns {_columns} (leverbench.ledger.records)")


@dataclass
class Dataset:
    header: RunHeaderRow                  # the ledger's header record
    turn: TurnTable                       # the turns that count (one attempt of each unit)
    call: CallTable                       # kind "call", counted
    probes: list[CallRow]                 # the counted attempt of each probe unit (with its retried tries)
    sentinels: list[CallRow]              # likewise for sentinels
    metrics: list[MetricsRow]
    arms: list[str]
    cases: list[str]                      # the engine comparison's cases (variants excluded)
    variants: dict[str, str]              # variant case name -> the case it varies
    baseline: str
    config: RunConfigRow                  # the experiment, as the header holds it (its arms and cases: analysis
    #                                       reads its settings from ``settings`` alone)
    settings: RunSettings                 # the run's settings, typed, defaults where the header has none
    arm_names: list[str]                  # ``arms``, then any other arm the records name (every call and turn
    #                                       record has one, a text: its schema requires it)
    case_names: list[str]                 # the configured cases and variants, then any other case the records name
    #                                       (every call and turn record has one, a text, as it has its arm)
    probe: CallTable                      # the probes as columns
    warnings: list[RunWarning] = field(default_factory=list)
    warmups: list[CallRow] = field(default_factory=list)  # the warm-up calls ("warmup"), in order
    turn_ids: list[Any] = field(default_factory=list)  # the counted turns' turn_id, as ``turn`` (with store_text, or
    #                                                    recorded turns: the replay's fidelity reads their calls)
    _knobs: tuple[dict[str, dict[str, JSONValue]], dict[str, dict[str, str]]] | None = field(default=None, repr=False)

    def _arm(self, arm: str) -> HeaderArmRow:
        """The header's entry of *arm* ({} where it has none)."""
        return self.header["arms"].get(arm, {})

    def conditions(self, arm: str) -> dict[str, JSONValue]:
        return dict(self._arm(arm).get("conditions", {}))

    def role(self, arm: str) -> str:
        return self._arm(arm).get("role", "") or ""

    def knobs(self, arm: str) -> dict[str, JSONValue]:
        """The arm's knobs: discovered facts, what its requests send, declared conditions (see :mod:`.knobs`)."""
        return self.knobs_and_contradictions(arm)[0]

    def knobs_and_contradictions(self, arm: str) -> tuple[dict[str, JSONValue], dict[str, str]]:
        """The arm's knobs and their contradictions, judged across the run's arms (:func:`.knobs.all_arm_knobs`:
        a knob another arm's endpoint stated and this one lacks is unknown; discovered facts that differ are
        knobs).  An arm the configuration does not list gets its own knobs alone."""
        if self._knobs is None:
            requests = {a["name"]: a.get("request") for a in self.config.get("arms", [])}
            # (a header arm is JSON, but mypy sees no TypedDict as a Mapping[str, JSONValue])
            header_arms = cast("Mapping[str, Mapping[str, JSONValue]]", self.header.get("arms") or {})
            self._knobs = all_arm_knobs(header_arms, requests, self.arms)
        knobs, contradictions = self._knobs
        if arm not in knobs:
            request = next((a.get("request") for a in self.config.get("arms", []) if a.get("name") == arm), None)
            return arm_knobs(cast("Mapping[str, JSONValue]", self._arm(arm)), request)
        return dict(knobs[arm]), dict(contradictions[arm])

    def arm_index(self, arm: str) -> int:
        return self.arm_names.index(arm)

    def case_index(self, case: str) -> int:
        return self.case_names.index(case)

    def cell(self, arm: str, case: str) -> int:
        """The code of one (arm, case) cell (see :meth:`cell_code`)."""
        return self.arm_index(arm) * len(self.case_names) + self.case_index(case)

    def cell_code(self, arm: np.ndarray, case: np.ndarray) -> np.ndarray:
        """One code per (arm, case): arm × len(case_names) + case."""
        code: np.ndarray = arm * len(self.case_names) + case
        return code

    @property
    def n_cells(self) -> int:
        return len(self.arm_names) * len(self.case_names)


def groups(codes: np.ndarray, n: int) -> list[np.ndarray]:
    """For each code 0 … n−1, the ascending indices (ledger order) where *codes* has it; other
    codes (e.g. −1) are left out."""
    if not n:
        return []
    idx = np.flatnonzero((codes >= 0) & (codes < n))
    sub = codes[idx]
    if n < 1 << 15:
        sub = sub.astype(np.int16)  # a stable sort of small integers is a radix sort
    order = idx[np.argsort(sub, kind="stable")]
    counts = np.bincount(sub, minlength=n)
    return np.split(order, np.cumsum(counts)[:-1])


def first_seen(by: list[np.ndarray]) -> list[int]:
    """The codes of the non-empty groups (from :func:`groups`) in the order of their first row."""
    firsts = [(int(g[0]), k) for k, g in enumerate(by) if len(g)]
    return [k for _, k in sorted(firsts)]


def turn_groups(ds: Dataset, select: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The selected calls grouped by (their cell, their turn), the groups numbered in the order of
    their first call: (group of each call, −1 where not selected; cell of each group; turn of each group)."""
    c, T = ds.call, ds.turn
    cell = ds.cell_code(c.arm, c.case)
    rows = np.flatnonzero(select)
    turn = c.turn[rows]
    if np.array_equal(cell[rows], ds.cell_code(T.arm, T.case)[turn]):  # as written: a turn's calls are in its cell
        first = np.full(len(T), len(c), np.int64)
        np.minimum.at(first, turn, rows)
        g_turn = np.flatnonzero(first < len(c))
        g_turn = g_turn[np.argsort(first[g_turn], kind="stable")]
        rank = np.full(len(T), -1, np.int64)
        rank[g_turn] = np.arange(len(g_turn))
        g = np.full(len(c), -1, np.int64)
        g[rows] = rank[turn]
        return g, ds.cell_code(T.arm, T.case)[g_turn], g_turn
    return _turn_groups_by_sorting(cell, turn, rows, len(T), len(c))


def _turn_groups_by_sorting(cell: np.ndarray, turn: np.ndarray, rows: np.ndarray, n_turns: int,
                            n_calls: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`turn_groups` for any calls (a call's cell need not be its turn's)."""
    nt = max(n_turns, 1)
    key = cell[rows] * nt + turn
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    g = np.full(n_calls, -1, np.int64)
    g[rows] = rank[inv.ravel()]
    return g, uniq[order] // nt, uniq[order] % nt


def _relabel(cols: Columns, key: str, into: list[str]) -> np.ndarray:
    """The label *key* of each row as an index into *into*, appending the names it does not hold."""
    codes, names = cols.labels[key]
    index = {n: i for i, n in enumerate(into)}
    remap = []
    for name in names:
        if name not in index:
            index[name] = len(into)
            into.append(name)
        remap.append(index[name])
    return np.array(remap, dtype=np.int64)[codes] if names else np.zeros(len(codes), np.int64)


def call_table(cols: Columns, arm_names: list[str], case_names: list[str], turn: np.ndarray) -> CallTable:
    """A :class:`CallTable` from the reader's columns (*turn*: each row's turn index, −1 for none);
    arm and case names met for the first time are appended to *arm_names* / *case_names*."""
    num = cols.numbers
    return CallTable(
        arm=_relabel(cols, "arm", arm_names), case=_relabel(cols, "case", case_names), turn=turn,
        ok=~cols.failed, has_timings=cols.has_timings,
        output=cols.hashes.get("output_sha256", np.full(len(cols.failed), -1, np.int64)),
        **{k: cols.flags[k] for k in CALL_FLAGS}, **{k: num[k] for k in CALL_NUMBERS},
        **{k: num["timings." + k] for k in CALL_TIMINGS},
    )


def _counted_of_each_unit(t: Columns) -> np.ndarray:
    """Indices of the turns that count: of each (arm, case, repeat), the first successful record in
    ledger order, else (every attempt failed) the last."""
    if not t.n:
        return np.zeros(0, np.int64)
    arm, case = t.labels["arm"][0], t.labels["case"][0]
    rep = np.nan_to_num(t.numbers["repeat"], nan=-np.inf)
    order = np.lexsort((np.arange(t.n), rep, case, arm))
    a, c, r = arm[order], case[order], rep[order]
    start = np.ones(t.n, bool)
    start[1:] = (a[1:] != a[:-1]) | (c[1:] != c[:-1]) | (r[1:] != r[:-1])
    unit = np.cumsum(start) - 1
    pick = np.flatnonzero(np.append(start[1:], True))  # each unit's last record (positions in *order*)
    ok = np.flatnonzero(~t.failed[order])
    units_ok, first_ok = np.unique(unit[ok], return_index=True)
    pick[units_ok] = ok[first_ok]
    return np.sort(order[pick])


def counted_records(records: Iterable[CallRow]) -> list[CallRow]:
    """Of each probe or sentinel unit (kind, arm, case, repeat, probe_tokens, position, probe_depth), the records of
    the attempt that counts, in ledger order: the first attempt whose final try succeeded, else the
    latest.  An attempt is its tries up to the first one not marked ``retried``."""
    attempts: dict[tuple[object, ...], list[list[int]]] = {}
    recs = list(records)
    for i, r in enumerate(recs):
        runs = attempts.setdefault((r.get("kind"), r.get("arm"), r.get("case"), r.get("repeat"),
                                    r.get("probe_tokens"), r.get("position"), r.get("probe_depth")), [])
        if not runs or not recs[runs[-1][-1]].get("retried"):
            runs.append([])
        runs[-1].append(i)
    keep: list[int] = []
    for runs in attempts.values():
        keep += next((run for run in runs if recs[run[-1]].get("error") is None), runs[-1])
    return [recs[i] for i in sorted(keep)]


def _turn_of_calls(calls: Columns, turns: Columns, kept: np.ndarray) -> np.ndarray:
    """For each call, the index (into *kept*) of the first counted turn with its turn_id; −1 for none."""
    tcodes, tnames = turns.labels["turn_id"]
    uniq, first = np.unique(tcodes[kept], return_index=True)
    lookup = np.full(len(tnames) + 1, -1, np.int64)  # the last slot: names the turns do not have
    lookup[uniq] = first
    ccodes, cnames = calls.labels["turn_id"]
    if cnames != tnames:  # not the reader's shared codes: map by name
        index = {n: i for i, n in enumerate(tnames)}
        ccodes = np.array([index.get(n, len(tnames)) for n in cnames], dtype=np.int64)[ccodes] if cnames else ccodes
    turn: np.ndarray = lookup[ccodes]
    return turn


def _calls_of_superseded_turns(calls: Columns, turns: Columns, kept: np.ndarray) -> int:
    """How many calls belong to a turn record that is not counted (a superseded attempt)."""
    if turns.n == len(kept):
        return 0
    names = turns.labels["turn_id"][1]
    gone = set(turns.labels["turn_id"][0].tolist()) - set(turns.labels["turn_id"][0][kept].tolist())
    gone_names = {names[i] for i in gone}
    ccodes, cnames = calls.labels["turn_id"]
    hit = np.array([n in gone_names for n in cnames], dtype=bool)
    return int(hit[ccodes].sum()) if len(cnames) else 0


def turn_table(t: Columns, kept: np.ndarray, arm_names: list[str], case_names: list[str]) -> TurnTable:
    """The counted turns (rows *kept* of the reader's columns) as a :class:`TurnTable`."""
    return TurnTable(arm=_relabel(t, "arm", arm_names)[kept], case=_relabel(t, "case", case_names)[kept],
                     ok=~t.failed[kept], **{k: t.flags[k][kept] for k in TURN_FLAGS},
                     **{k: t.numbers[k][kept] for k in TURN_NUMBERS})


def dataset(ledger: Ledger[RunHeaderRow]) -> Dataset:
    h = ledger.header
    cfg = h["config"]
    settings = RunSettings.of_header(cfg, ledger.path)
    # a unit re-run after a resume (it had failed) supersedes its failed records
    turn_cols, call_cols = ledger.columns("turn"), ledger.columns("call")
    kept = _counted_of_each_unit(turn_cols)
    arms = [a["name"] for a in cfg.get("arms", [])]
    cases = [c["name"] for c in cfg.get("cases", []) if not c.get("variant_of")]
    variants = {c["name"]: of for c in cfg.get("cases", []) if (of := c.get("variant_of"))}
    arm_names = list(dict.fromkeys(arms))
    case_names = list(dict.fromkeys(c["name"] for c in cfg.get("cases", [])))
    all_calls = call_table(call_cols, arm_names, case_names, _turn_of_calls(call_cols, turn_cols, kept))
    counted = all_calls.turn >= 0
    calls = all_calls if counted.all() else all_calls.take(counted)
    warnings = [RunWarning(WarningKind.LEDGER_REPAIR, w) for w in ledger.warnings]
    all_probes, all_sentinels = list(ledger.of_kind("probe")), list(ledger.of_kind("sentinel"))
    probes, sentinels = counted_records(all_probes), counted_records(all_sentinels)
    superseded_calls = _calls_of_superseded_turns(call_cols, turn_cols, kept)
    orphans = len(all_calls) - len(calls) - superseded_calls
    if orphans:
        warnings.append(RunWarning(WarningKind.ORPHAN_CALLS, f"{orphans} call(s) of turns cut off by an interrupted "
                                   "run are in the ledger but not counted (their turns were run again on resume)"))
    superseded = {"turn": turn_cols.n - len(kept), "probe": len(all_probes) - len(probes),
                  "sentinel": len(all_sentinels) - len(sentinels)}
    if any(superseded.values()):
        what = ", ".join(f"{n} {k}(s)" for k, n in superseded.items() if n)
        warnings.append(RunWarning(WarningKind.SUPERSEDED,
                                   f"{what} superseded: another attempt of the same unit counts "
                                   "(its first success, else its latest; a resumed run re-runs the units that failed); "
                                   f"the superseded records ({superseded_calls} call(s) of superseded turns included) "
                                   "stay in the ledger, not counted"))
    probe = call_table(Columns.of("call", probes), arm_names, case_names, np.full(len(probes), -1, np.int64))
    return Dataset(
        header=h, turn=turn_table(turn_cols, kept, arm_names, case_names), call=calls,
        probes=probes, sentinels=sentinels,
        metrics=list(ledger.of_kind("metrics")), arms=arms, cases=cases, variants=variants,
        baseline=settings.baseline, config=cfg, settings=settings, arm_names=arm_names, case_names=case_names,
        probe=probe, warnings=warnings, warmups=list(ledger.of_kind("warmup")),
        turn_ids=_labels_of(turn_cols, "turn_id", kept)
        if settings.store_text or any(c.get("recorded_from") for c in cfg.get("cases", [])) else [],
    )


def _labels_of(cols: Columns, key: str, rows: np.ndarray) -> list[Any]:
    codes, names = cols.labels[key]
    names = [*names, None]
    return [names[min(int(c), len(names) - 1)] for c in codes[rows]]


def sums(codes: np.ndarray, values: np.ndarray | Iterable[float] | None, n: int) -> np.ndarray:
    """Σ of *values* per code 0 … n−1 (count of rows when *values* is None), added in row order;
    rows with a negative code are left out."""
    codes = np.where(codes < 0, n, codes)
    w = None if values is None else np.asarray(values, dtype=float)
    return np.bincount(codes, weights=w, minlength=n + 1)[:n].astype(float)


def zero_nan(x: np.ndarray) -> np.ndarray:
    """``x or 0`` for a column: NaN (absent or null) counts as 0."""
    return np.where(np.isnan(x), 0.0, x)


def cached_tokens(r: CallRow) -> float | None:
    """A call's cached prompt tokens: usage ``cached_tokens``, else llama.cpp ``timings.cache_n``; None: neither."""
    if (usage := r.get("cached_tokens")) is not None:
        return usage
    n = (r.get("timings") or {}).get("cache_n")
    return float(n) if isinstance(n, str) else n  # (a server's number the ledger stored as text: "NaN", ...)
