#!/usr/bin/env bash
# Mutation check: the test suite must fail when a hand-picked bug is put into the code.
#
# For each mutation below: copy this checkout's files (tracked and untracked-but-not-ignored, as they
# are in the working tree) to a temporary directory, apply the mutation there (an exact text replaced:
# if the text no longer occurs exactly once, the script stops with an error and the mutation must be updated),
# run the tests chosen to catch it (a subset, so the whole check takes a few minutes), and report
# KILLED (a test failed) or SURVIVED (every test passed: a test is missing).  Before the mutations,
# the same tests must pass on the unmutated copy.
#
#   a   guard always citable              analysis/base/guard.py judge: citable = True
#   b1  percentile off by one rank        analysis/base/stats.py percentile: the next order statistic
#   b2  load percentiles rounded up       analysis/load/stages.py distribution: NumPy's "higher" rank instead of linear
#   c1  retried attempt counted as clean  analysis/base/guard.py judge: retried calls no longer refuse the multiplier
#   c2  retried attempt counted as ok     analysis/base/dataset.py call_table: a retried (failed) attempt is ok
#   c3  retried attempt counted in load   analysis/load/stages.py stage_row: retried attempts count as requests
#   d   failed call dropped               runner/send.py ArmSender.send: only calls without an error are appended
#   e   HTML autoescape off               report/html.py: jinja2 Environment(autoescape=False)
#
# Usage: scripts/mutation-check.sh [NAME...]      (default: all; PYTHON=... picks the interpreter,
#        default .venv/bin/python; the copy's src/ is put first on PYTHONPATH)
# Exit status: 0 all killed, 1 some survived, 2 the check itself could not run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || { echo "mutation-check: no Python at $PY (run scripts/install.sh --test, or set PYTHON)" >&2; exit 2; }

# name | what | tests that should catch it
MUTATIONS=(
  "a|guard always citable|tests/test_oracles.py tests/test_guard.py"
  "b1|stats.percentile off by one rank|tests/test_oracles.py tests/test_load.py::test_distribution_matches_numpy"
  "b2|load percentiles off by one rank (rounded up)|tests/test_oracles.py tests/test_load.py::test_distribution_matches_numpy"
  "c1|retried attempt counted as a clean success by the guard|tests/test_oracles.py tests/test_guard.py"
  "c2|retried attempt counted as a successful call|tests/test_oracles.py"
  "c3|retried attempt counted as a load request|tests/test_oracles.py"
  "d|failed call dropped from the ledger|tests/test_run_sim.py::test_failed_calls_are_recorded_and_counted tests/test_load_faults.py"
  "e|HTML autoescape off|tests/test_html_report.py"
)

# Each mutation: the file, the exact text to replace (it must occur exactly once: if the code changed so
# that it does not, the check stops and the mutation must be updated), and the mutated text.
mutate() {  # mutate NAME DIR
  "$PY" - "$1" "$2" <<'PY'
import sys
from pathlib import Path

MUTATIONS = {
    "a": ("src/leverbench/analysis/base/guard.py", '"citable": not reasons,', '"citable": True,'),
    "b1": ("src/leverbench/analysis/base/stats.py", "    lo = math.floor(rank)\n",
           "    lo = min(math.floor(rank) + 1, len(s) - 1)\n"),
    "b2": ("src/leverbench/analysis/load/stages.py", "for v in np.percentile(a, PCTS))",
           'for v in np.percentile(a, PCTS, method="higher"))'),
    "c1": ("src/leverbench/analysis/base/guard.py", '        if retried := cell.get("retried_calls"):',
           "        if retried := None:"),
    "c2": ("src/leverbench/analysis/base/dataset.py", "ok=~cols.failed, has_timings=cols.has_timings,",
           'ok=~cols.failed | cols.flags["retried"], has_timings=cols.has_timings,'),
    "c3": ("src/leverbench/analysis/load/stages.py", '    final = [r for r in rs if not r.get("retried")]', "    final = list(rs)"),
    "d": ("src/leverbench/runner/send.py",
          "                self.recorder.append(rec)  # returns at once: the next call is not held up by the fsync",
          "                if rec.error is None:\n                    self.recorder.append(rec)"),
    "e": ("src/leverbench/report/html.py", "autoescape=True", "autoescape=False"),
}
name, root = sys.argv[1], Path(sys.argv[2])
rel, old, new = MUTATIONS[name]
path = root / rel
text = path.read_text(encoding="utf-8")
if text.count(old) != 1:
    sys.exit(f"mutation {name}: {old!r} occurs {text.count(old)} times in {rel}, not once: update it in scripts/mutation-check.sh")
path.write_text(text.replace(old, new), encoding="utf-8")
PY
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/leverbench-mutation.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

copy_tree() {  # copy_tree DEST: this checkout's files as they are now
  mkdir -p "$1"
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
     | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
     | xargs -0 cp --parents -t "$1")
}

run_tests() {  # run_tests DIR TESTS...: pytest's exit status; its summary in DIR.log
  local dir="$1"; shift
  (cd "$dir" && PYTHONPATH="$dir/src" "$PY" -m pytest -q -rf -p no:cacheprovider "$@" >"$dir.log" 2>&1)
}

selected=("$@")
want() { [ ${#selected[@]} -eq 0 ] && return 0; local s; for s in "${selected[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

echo "mutation check of $ROOT (python: $PY)"
base="$WORK/base"
copy_tree "$base"
all_tests=$(for m in "${MUTATIONS[@]}"; do IFS='|' read -r name _ tests <<<"$m"; if want "$name"; then echo "$tests"; fi; done \
            | tr ' ' '\n' | sort -u | tr '\n' ' ')
[ -n "${all_tests// /}" ] || { echo "mutation-check: no such mutation: $*" >&2; exit 2; }
# shellcheck disable=SC2086
if ! run_tests "$base" $all_tests; then
  echo "mutation-check: the chosen tests fail on the unmutated code; fix that first:" >&2
  tail -20 "$base.log" >&2
  exit 2
fi
echo "unmutated: the chosen tests pass ($(tail -1 "$base.log"))"

survived=0
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r name what tests <<<"$m"
  want "$name" || continue
  dir="$WORK/$name"
  copy_tree "$dir"
  if ! mutate "$name" "$dir" 2>"$dir.apply"; then
    echo "mutation-check: mutation $name ($what) no longer applies:" >&2
    cat "$dir.apply" >&2
    exit 2
  fi
  status=0
  # shellcheck disable=SC2086
  run_tests "$dir" $tests || status=$?
  case "$status" in
    0) verdict="SURVIVED"; survived=$((survived + 1)); detail="every test passed: $tests" ;;
    1) verdict="KILLED"; detail="$(grep -c '^FAILED' "$dir.log" || true) failed: $(grep '^FAILED' "$dir.log" | sed 's/^FAILED //; s/ - .*//' | head -4 | tr '\n' ' ')" ;;
    *) echo "mutation-check: pytest could not run for mutation $name (exit $status):" >&2; tail -20 "$dir.log" >&2; exit 2 ;;
  esac
  printf '%-3s %-9s %s\n      %s\n' "$name" "$verdict" "$what" "$detail"
done
if [ "$survived" -gt 0 ]; then
  echo "$survived mutation(s) survived: add the test that would catch each" >&2
  exit 1
fi
echo "all mutations killed"
