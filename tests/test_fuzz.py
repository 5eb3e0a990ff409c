"""Hostile input never gets a traceback, a hang or an internal error (issue 28): a property-based fuzz suite.

Mutated experiment files, ledgers and traffic files (:mod:`fuzz_inputs`) are run through the CLI (``run`` against
a closed port, ``report``, ``project``, ``analyze``, ``whatif``) in a separate worker process, each with a time
limit; every one must end with exit code 0, 1 or 2, no ``Traceback``, never 70 (the internal-error handler), and
on 1 or 2 one ``leverbench: error:`` line ending stderr.  A fixed number of examples, derandomized: CI tries the
same inputs every time (``benchmarks/fuzz_inputs.py`` runs the same generators for as long as asked).

Also here: the handler itself (one line, exit 70; ``LEVERBENCH_DEBUG=1`` lets the traceback through), a run in
which every call failed (exit 1, after its ledger and reports are written) and a request JSON cannot carry.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import click
import fuzz_inputs as F
import limits
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, example, given, settings

from leverbench.cli import cli
from leverbench.cli.common import EX_SOFTWARE, Command
from leverbench.errors import BadInput
from leverbench.runner import strict_json


def known(cases: list[F.Case]):
    """The hostile inputs issue 28 lists, tried first (hypothesis's explicit examples), then the generated ones."""
    def mark(test):
        for case in reversed(cases):
            test = example(case=case)(test)
        return test
    return mark


# Derandomized: the same inputs on every run; no shrinking (a hang would be replayed for each step): the failure
# names its input in words, and the input's files are left in the example's folder.
FUZZ = settings(max_examples=30, derandomize=True, deadline=None, database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])


@pytest.fixture(scope="module")
def worker():
    w = F.CliWorker()
    yield w
    w.close()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def check(worker: F.CliWorker, scratch: Path, case: F.Case, limit_s: float) -> None:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    out = F.run_case(worker, case, folder, limit_s)
    found = F.problems(out, limit_s)
    assert not found, (f"{found}\ninput: {case.describe()}\nfiles in {folder}\nexit {out.rc}; stderr's end:\n"
                       + "\n".join(out.stderr.rstrip().split("\n")[-15:]))


@FUZZ
@known(F.known_experiments())
@given(case=F.experiments())
def test_mutated_experiments_end_in_one_error_line_or_run(worker, scratch, case):
    check(worker, scratch, case, limits.SMALL_RUN_S)


@FUZZ
@known(F.known_ledgers())
@given(case=F.ledgers())
def test_mutated_ledgers_end_in_one_error_line_or_a_report(worker, scratch, case):
    check(worker, scratch, case, limits.SMALL_COMMAND_S)


@FUZZ
@known(F.known_traffic())
@given(case=F.traffic())
def test_mutated_traffic_ends_in_one_error_line_or_an_analysis(worker, scratch, case):
    check(worker, scratch, case, limits.SMALL_COMMAND_S)


def test_the_unmutated_inputs_are_valid(worker, scratch):
    """The generators start from valid inputs: each runs to its end (the run: every call refused, exit 1)."""
    base = F.Case("experiment", {**F.support_files(), "exp.toml": F.to_toml(F.base_experiment()).encode()},
                  ["run", "--out", "run", "exp.toml"])
    folder = Path(tempfile.mkdtemp(dir=scratch))
    out = F.run_case(worker, base, folder, limits.SMALL_RUN_S)
    assert out.rc == 1 and "every call failed" in out.stderr.splitlines()[-1], out.stderr[-2000:]
    assert (folder / "run" / "report.html").exists()
    for name in F.GOLDEN_LEDGERS:
        led = F.Case("ledger", {"run/ledger.jsonl": (F.GOLDEN / name).read_bytes()}, ["report", "run"])
        out = F.run_case(worker, led, Path(tempfile.mkdtemp(dir=scratch)), limits.SMALL_COMMAND_S)
        assert out.rc == 0, out.stderr[-2000:]


def test_the_harness_tells_a_hang_and_a_bad_ending(worker, scratch):
    """The checks can fail: a command that never exits (a simulator serving until stopped; 3 s is the input
    here, not a limit on waiting) is a hang, its process killed and the next command served by a fresh one;
    a traceback, exit 70 and a second error line are problems."""
    out = worker.invoke(["sim", "--port", "0"], scratch, 3.0)
    assert out.hung and F.problems(out, 3.0) == ["hang: no exit within 3 s"]
    assert worker.invoke(["--version"], scratch, limits.IMPORT_AND_EXIT_S).rc == 0
    tb = F.Outcome(1, "", "Traceback (most recent call last):\n  ...\nKeyError: 'zzz'\n", 0.1, exception="KeyError")
    assert any(p.startswith("traceback") for p in F.problems(tb, 1))
    internal = F.Outcome(70, "", "leverbench: internal error: X: y (...)\n", 0.1)
    assert F.problems(internal, 1)[0].startswith("exit code 70")
    two = F.Outcome(2, "", "leverbench: error: a\nb\n", 0.1)
    assert F.problems(two, 1) and not F.problems(F.Outcome(2, "", "x\nleverbench: error: a\n", 0.1), 1)


# ------------------------------------------------------------------ the last-resort handler


@click.command(cls=Command)
@click.argument("what")
def _buggy(what: str) -> None:
    if what == "type":
        raise TypeError("'>' not supported between\ninstances of 'float' and 'str'")
    if what == "recursion":
        raise RecursionError("maximum recursion depth exceeded")
    if what == "bad":
        raise BadInput("x.toml: a: wrong")
    raise click.UsageError("no such thing")


def test_an_unexpected_exception_is_one_internal_error_line_with_exit_70():
    res = CliRunner().invoke(_buggy, ["type"])
    assert res.exit_code == EX_SOFTWARE == 70
    assert res.stderr == ("leverbench: internal error: TypeError: '>' not supported between instances of 'float' "
                          "and 'str' (a bug in leverbench; rerun with LEVERBENCH_DEBUG=1 for the traceback and "
                          "report it)\n")
    res = CliRunner().invoke(_buggy, ["recursion"])
    assert res.exit_code == 70 and res.stderr.startswith("leverbench: internal error: RecursionError: ")
    # LEVERBENCH_DEBUG=1: the traceback comes through; leverbench's own errors and click's keep their codes
    res = CliRunner().invoke(_buggy, ["type"], env={"LEVERBENCH_DEBUG": "1"})
    assert isinstance(res.exception, TypeError)
    res = CliRunner().invoke(_buggy, ["bad"])
    assert res.exit_code == 2 and res.stderr == "leverbench: error: x.toml: a: wrong\n"
    res = CliRunner().invoke(_buggy, ["usage"])  # click's own errors: as click prints them
    assert res.exit_code == 2 and "Error: no such thing" in res.stderr


# ------------------------------------------------------------------ a run whose every call failed


def tiny_experiment(tmp: Path, extra_case: str = "", extra_arm: str = "") -> Path:
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "closed"
repeats = 1
baseline = "a"
sentinel_tokens = 0

[[arms]]
name = "a"
role = "baseline"
base_url = "{F.CLOSED_URL}"
model = "m"
{extra_arm}
[[cases]]
name = "c"
prompt = "hi"
max_tokens = 1
{extra_case}''')
    return p


def test_a_run_whose_every_call_failed_exits_1_after_writing_its_reports(tmp_path):
    res = CliRunner().invoke(cli, ["run", "--out", str(tmp_path / "run"), str(tiny_experiment(tmp_path))])
    assert res.exit_code == 1, res.output
    last = res.stderr.rstrip("\n").split("\n")[-1]
    assert last.startswith("leverbench: error: every call failed (1 of 1): first error: connect: ")
    assert last.endswith(f"; the ledger is in {tmp_path / 'run'}")
    for name in ("ledger.jsonl", "summary.json", "report.md", "report.html"):
        assert (tmp_path / "run" / name).exists(), name


# ------------------------------------------------------------------ the JSON a request carries


@pytest.mark.parametrize(("arm", "case", "says"), [
    ("request = { top_p = nan }", "", ("arms[0]", "top_p", "nan")),
    ("request = { logit_bias = { a = [1, -inf] } }", "", ("arms[0]", "logit_bias", "-inf")),
    ("", "temperature = inf", ("cases[0]", "temperature", "inf")),
])
def test_a_request_field_json_cannot_carry_is_refused_before_the_run(tmp_path, arm, case, says):
    """Refused by the experiment's loader or before the run starts (the runner's check of what it will send):
    either way one line naming the file, the key and the value, and nothing started."""
    res = CliRunner().invoke(cli, ["run", "--out", str(tmp_path / "run"), str(tiny_experiment(tmp_path, case, arm))])
    assert res.exit_code == 2, res.output
    last = res.stderr.rstrip("\n").split("\n")[-1]
    assert last.startswith(f"leverbench: error: {tmp_path / 'exp.toml'}: ") and all(w in last for w in says), last
    assert not (tmp_path / "run").exists()  # nothing started


def test_tool_schemas_json_cannot_carry_are_refused_before_the_run(tmp_path):
    (tmp_path / "tools.json").write_text('[{"type": "function", "function": {"name": "f", "x": NaN}}]')
    res = CliRunner().invoke(cli, ["run", "--out", str(tmp_path / "run"),
                                   str(tiny_experiment(tmp_path, 'tools = "tools.json"\n'))])
    assert res.exit_code == 2, res.output
    last = res.stderr.rstrip("\n").split("\n")[-1]
    assert last.startswith("leverbench: error: ") and "tools" in last and "nan" in last.lower(), last
    assert not (tmp_path / "run").exists()


def test_every_body_goes_out_as_strict_json():
    assert json.loads(strict_json.dumps({"a": [1, 2.5], "b": "x"})) == {"a": [1, 2.5], "b": "x"}
    with pytest.raises(BadInput, match=r"request field messages\[0\]\.t: inf cannot be sent"):
        strict_json.dumps({"messages": [{"t": math.inf}]})


def test_an_arms_long_name_makes_a_file_name_the_system_takes(tmp_path):
    """An arm's name goes into its engine's log file name (engine-NAME.log): 300 characters (a name is not
    bounded) must not end in 'File name too long' when the engine starts."""
    from leverbench.config import load  # noqa: PLC0415
    from leverbench.runner.run import Runner  # noqa: PLC0415

    p = tmp_path / "exp.toml"
    names = ["é" * 150 + "a", "é" * 150 + "b"]
    p.write_text('[experiment]\nname = "e"\nbaseline = "' + names[0] + '"\n'
                 + "".join(f'[[arms]]\nname = "{n}"\nrole = "{r}"\nengine = {{ kind = "embedded" }}\n'
                           for n, r in zip(names, ("baseline", "treatment")))
                 + '[[cases]]\nname = "c"\nprompt = "hi"\n')
    runner = Runner(load(p), tmp_path / "run")
    runner._prepare_endpoints()
    logs = [ep.engine.log_path for ep in runner.endpoints.values()]
    assert len(set(logs)) == 2  # two long names stay apart
    for log in logs:
        log.parent.mkdir(parents=True, exist_ok=True)
        open(log, "ab").close()


def test_a_trace_prompt_builds_only_the_words_it_needs_of_a_huge_block(monkeypatch):
    """block_tokens = 10^12 (no bound says otherwise) with prompts of 64 tokens: each hash block's text is built
    only as far as the prompt needs (it used to be built whole: a hang, then out of memory), and it is the same
    text as a smaller block's start."""
    from leverbench.runner import prompts  # noqa: PLC0415

    asked: list[int] = []
    real = prompts.words

    def spy(n: int, seed: str) -> list[str]:
        asked.append(n)
        return real(min(n, 10_000), seed)
    monkeypatch.setattr(prompts, "words", spy)
    huge = prompts.PromptBuilder(10**12).content(64, "r0", (1, 2))
    assert max(asked) <= 64 and len(huge.split()) == 64
    assert huge == prompts.PromptBuilder(100).content(64, "r0", (1, 2))  # block 1's first 64 words either way
    assert prompts.PromptBuilder(40).content(64, "r0", (1, 2)).split()[:40] == huge.split()[:40]
