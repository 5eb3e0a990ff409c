"""``tune.html`` (issue 40), rendered from a hand-made ``tune.json`` (no engine): the numbers put in appear, a
refused race looks refused (never like a win, whatever its ratio), one plot per operating point, each race's report
linked relative to the page, the page well formed and fetching nothing; and ``leverbench tune`` writes it."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.report.tune_html import adopted, chained_levels, render_tune_html
from leverbench.schema.tune_rows import TUNE_SUMMARY_SCHEMA, PointRow, RaceRow, TuneSummary

VOID = {"meta", "link", "br", "hr", "img", "input", "col", "area", "base", "source", "wbr"}
SVG_LEAVES = {"line", "circle", "rect", "path", "polyline"}  # written self-closing


def race(n: int, inc: dict[str, object], cand: dict[str, object], outcome: str, ratio: Optional[float],
         low: Optional[float] = None, high: Optional[float] = None, *, out: Path, reason: Optional[str] = None,
         repeats: int = 4, engine_s: float = 10.0) -> RaceRow:
    return {"incumbent": inc, "candidate": cand, "point": 1, "outcome": outcome, "ratio": ratio, "low": low,
            "high": high, "engine_s": engine_s, "repeats": repeats, "reason": reason,
            "run_dir": str(out / "races" / f"{n:03d}")}


def k(draft: int, slots: int = 1) -> dict[str, object]:
    return {"k": draft, "slots": slots}


def point(n: int, path: list[RaceRow], final: list[RaceRow], vs: Optional[RaceRow], best: dict[str, object],
          confirmed: bool, words: str, not_excluded: list[str]) -> PointRow:
    base = best == k(0)
    return {"point": n, "recommended": best if confirmed else k(0), "recommended_words": words,
            "command": f"sim --port {{port}} --draft-k {best['k']} --slots {best['slots']}", "best": best,
            "best_words": words, "is_baseline": base, "confirmed": confirmed, "against_baseline": vs,
            "stopped": "converged", "engine_s": sum(r["engine_s"] for r in path), "grid_engine_s": 123.0,
            "grid_configurations": 6, "races": len(path), "path": path, "final": final,
            "not_excluded": not_excluded}


def summary(out: Path) -> TuneSummary:
    """Point 1: k=1 adopted (1.50x), a refused race with a tempting 3.00x, k=2 adopted (1.20x), an undecided
    race, the baseline against the winner (1.75x).  Point 4: a worse race and a refused one with no ratio; the
    baseline stays."""
    r1 = race(1, k(0), k(1), "better", 1.50, 1.40, 1.60, out=out, engine_s=11.0)
    r2 = race(2, k(1), k(1, 2), "refused", 3.00, 2.00, 4.50, out=out, reason="unequal work: the arms' tokens differ")
    r3 = race(3, k(1), k(2), "better", 1.20, 1.10, 1.30, out=out, repeats=6, engine_s=13.0)
    r4 = race(4, k(2), k(2, 2), "undecided", 1.03, 0.95, 1.12, out=out, reason="no verdict after 12 repeats",
              repeats=12, engine_s=37.0)
    r5 = race(5, k(0), k(2), "better", 1.75, 1.60, 1.90, out=out, engine_s=14.0)
    p1 = point(1, [r1, r2, r3, r4, r5], [r5, r3, r4], r5, k(2), True, "k=2 slots=1", [])
    s1 = race(6, k(0), k(1), "worse", 0.80, 0.75, 0.85, out=out)
    s2 = race(7, k(0), k(0, 2), "refused", None, out=out, reason="the engine did not start: too many slots")
    p4 = point(4, [s1, s2], [s1, s2], None, k(0), True, "k=0 slots=1",
               ["k and slots: no configuration changing both from k=0 slots=1 was raced"])
    return {"schema": TUNE_SUMMARY_SCHEMA, "file": "tune.toml", "knobs": {"k": [0, 1, 2], "slots": [1, 2]},
            "baseline": k(0), "exclude": [], "min_effect": 1.05, "confidence": 0.95, "budget_engine_s": None,
            "engine_s": 113.0, "points": [p1, p4], "objective": "turn_time", "gpus": None}


class Tags(HTMLParser):
    """Every start tag with its attributes, every section's svgs; every tag closed in order (or a void one)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.starts: list[tuple[str, dict[str, Optional[str]]]] = []
        self.svgs_per_section: list[int] = []
        self.rows: list[tuple[str, list[str], list[str]]] = []  # (tr class, cell texts, cell classes)
        self._cell: Optional[list[str]] = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        a = dict(attrs)
        self.starts.append((tag, a))
        if tag == "section":
            self.svgs_per_section.append(0)
        if tag == "svg" and self.svgs_per_section:
            self.svgs_per_section[-1] += 1
        if tag == "tr":
            self.rows.append((a.get("class") or "", [], []))
        if tag == "td":
            self.rows[-1][2].append(a.get("class") or "")
            self._cell = []
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        self.starts.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1][1].append("".join(self._cell).strip())
            self._cell = None
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parsed(page: str) -> Tags:
    t = Tags()
    t.feed(page)
    t.close()
    return t


def test_chaining_multiplies_the_ratios_from_the_baseline_and_a_refused_race_places_nothing(tmp_path):
    p1 = summary(tmp_path)["points"][0]
    levels = chained_levels(k(0), p1["path"])
    assert levels["k=0 slots=1"] == 1.0
    assert abs(levels["k=1 slots=1"] - 1.50) < 1e-12
    assert abs(levels["k=2 slots=1"] - 1.50 * 1.20) < 1e-12  # the first placement, not race 5's direct 1.75
    assert abs(levels["k=2 slots=2"] - 1.50 * 1.20 * 1.03) < 1e-12
    assert "k=1 slots=2" not in levels  # its only race was refused
    assert adopted(k(0), p1["path"]) == [True, False, True, False, False]  # race 5 (baseline vs winner) moves nothing


def test_the_page_shows_the_numbers_put_in(tmp_path):
    page = render_tune_html(summary(tmp_path), tmp_path)
    t = parsed(page)
    text = re.sub(r"\s+", " ", page)
    assert "At 1 request in flight: run k=2 slots=1" in text and "At 4 requests in flight: run k=0 slots=1" in text
    assert "against the baseline: better, 1.75x [1.60–1.90] (95% confidence" in text
    assert "sim --port {port} --draft-k 2 --slots 1" in text
    assert "search: 5 races, 85 engine-s (the full grid of 6 configurations: ~123 engine-s, estimated)" in text
    assert "k and slots: no configuration changing both from k=0 slots=1 was raced" in text
    by_race = [r for r in t.rows if r[1]]  # the races of point 1, then of point 4
    assert by_race[0][1][:8] == ["1", "k=1 slots=1", "k=0 slots=1", "better", "1.50x [1.40–1.60]", "1.50x", "4", "11"]
    r3 = by_race[2][1]
    assert r3[1:8] == ["k=2 slots=1", "k=1 slots=1", "better", "1.20x [1.10–1.30]", f"{1.5 * 1.2:.2f}x", "6", "13"]
    assert by_race[3][1][5] == f"{1.5 * 1.2 * 1.03:.2f}x" and "no verdict after 12 repeats" in by_race[3][1][8]
    assert "the answer's race against the baseline" in by_race[4][1][8] and by_race[4][1][5] == "1.75x"
    assert [r[0] for r in by_race[:5]] == ["adopted", "refused-row", "adopted", "", ""]


def test_a_refused_race_looks_refused_never_like_a_win(tmp_path):
    page = render_tune_html(summary(tmp_path), tmp_path)
    t = parsed(page)
    by_race = [r for r in t.rows if r[1]]
    for i in (1, 6):  # race 2 at point 1 (a 3.00x ratio) and race 2 at point 4 (none)
        cls, cells, classes = by_race[i]
        assert cls == "refused-row" and cells[3] == "refused" and "refused" in classes[3].split()
        assert "adopted" not in cells[8] and cells[5] == "—"  # placed nowhere, adopted never
    assert "struck" in by_race[1][2][4] and by_race[1][1][4] == "3.00x [2.00–4.50]"
    assert "unequal work: the arms' tokens differ" in by_race[1][1][8]
    # in the plot: a cross (class refused) titled with its race, no stem or circle for it
    svg = page[page.index("<svg"):page.index("</svg>")]
    groups = re.findall(r"<g([^>]*)><title>race (\d+): ([^<]*)</title>(.*?)</g>", svg)
    by_n = {n: (attrs, title, body) for attrs, n, title, body in groups}
    assert 'class="refused"' in by_n["2"][0] and "<circle" not in by_n["2"][2]
    assert "refused" in by_n["2"][1] and "adopted" not in by_n["2"][1]
    for n in ("1", "3"):
        assert 'class="refused"' not in by_n[n][0] and "<circle" in by_n[n][2] and "adopted" in by_n[n][1]


def test_one_plot_per_point_and_the_links_are_relative(tmp_path):
    out = tmp_path / "tune"
    s = summary(out)
    (out / "races" / "001").mkdir(parents=True)
    (out / "races" / "001" / "report.html").write_text("<p>race 1</p>")
    (out / "races" / "003").mkdir(parents=True)
    (out / "races" / "003" / "report.html").write_text("<p>race 3</p>")
    s["points"][0]["path"][2]["run_dir"] = "/elsewhere/old-tune/races/003"  # a tune directory moved since
    t = parsed(render_tune_html(s, out))
    assert t.svgs_per_section == [1, 1]
    hrefs = [a["href"] for tag, a in t.starts if tag == "a" and not (a["href"] or "").startswith("#")]
    assert hrefs == ["races/001/report.html", "races/003/report.html"]
    assert all(not Path(h or "").is_absolute() and (out / (h or "")).is_file() for h in hrefs)
    assert not [a for tag, a in parsed(render_tune_html(s, None)).starts if tag == "a" and "report" in a["href"]]


def test_the_page_is_well_formed_and_fetches_nothing(tmp_path):
    s = summary(tmp_path)
    s["knobs"]["k"].append("<script>alert(1)</script>")
    s["points"][0]["path"][1]["reason"] = '<img src="http://x.example/a.png"> & "quoted"'
    page = render_tune_html(s, tmp_path)
    t = parsed(page)
    assert not t.errors and not t.stack, (t.errors, t.stack)
    assert "<script>" not in page and "<img" not in page  # text is text
    for tag, attrs in t.starts:
        for name in ("src", "href", "xlink:href", "action"):
            assert not re.match(r"\s*(https?:)?//", attrs.get(name) or "", re.I), (tag, attrs)
    csp = next(a["content"] for tag, a in t.starts if tag == "meta" and a.get("http-equiv"))
    assert "default-src 'none'" in (csp or "")


def test_the_command_writes_the_page_beside_tune_json(tmp_path, monkeypatch):
    import leverbench.config.tune as config_tune  # noqa: PLC0415
    import leverbench.tune.run as tune_run  # noqa: PLC0415

    out = tmp_path / "out"

    def fake_run(tune: object, where: Path, progress: object = None) -> TuneSummary:
        where.mkdir(parents=True)
        return summary(where)

    monkeypatch.setattr(config_tune, "load_tune", lambda path: object())
    monkeypatch.setattr(tune_run, "run_tune", fake_run)
    res = CliRunner().invoke(cli, ["tune", str(tmp_path / "tune.toml"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{out}/tune.html" in res.output
    assert "At 1 request in flight: run k=2 slots=1" in (out / "tune.html").read_text(encoding="utf-8")
