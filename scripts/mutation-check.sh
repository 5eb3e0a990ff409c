#!/usr/bin/env bash
# Mutation check: the test suite must fail when a hand-picked bug is put into the code.
#
# For each mutation below: copy this checkout's files (tracked and untracked-but-not-ignored, as they
# are in the working tree) to a temporary directory, apply the mutation there with `git apply` (an
# exact patch: if it no longer applies, the script stops with an error and the patch must be updated),
# run the tests chosen to catch it (a subset, so the whole check takes a few minutes), and report
# KILLED (a test failed) or SURVIVED (every test passed: a test is missing).  Before the mutations,
# the same tests must pass on the unmutated copy.
#
#   a   guard always citable              analysis/guard.py judge: citable = True
#   b1  percentile off by one rank        analysis/stats.py percentile: the next order statistic
#   b2  load percentiles rounded up       analysis/load.py distribution: NumPy's "higher" rank instead of linear
#   c1  retried attempt counted as clean  analysis/guard.py judge: retried calls no longer refuse the multiplier
#   c2  retried attempt counted as ok     analysis/dataset.py call_table: a retried (failed) attempt is ok
#   c3  retried attempt counted in load   analysis/load.py stage_row: retried attempts count as requests
#   d   failed call dropped               runner/run.py _call: only calls without an error are appended
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

patch_of() {
  case "$1" in
    a) cat <<'PATCH'
--- a/src/leverbench/analysis/guard.py
+++ b/src/leverbench/analysis/guard.py
@@ -60,7 +60,7 @@
             reasons.append(f"output volume spread {sp:.1%} > {tol:.0%}")
     return {
         "value": value,
-        "citable": not reasons,
+        "citable": True,
         "reason": "; ".join(reasons) if reasons else None,
         "volume_spread": sp,
         "controlled": len(knobs) <= 1,
PATCH
    ;;
    b1) cat <<'PATCH'
--- a/src/leverbench/analysis/stats.py
+++ b/src/leverbench/analysis/stats.py
@@ -37,7 +37,7 @@
         raise ValueError("percentile of an empty sample")
     s = sorted(xs)
     rank = p / 100.0 * (len(s) - 1)
-    lo = math.floor(rank)
+    lo = min(math.floor(rank) + 1, len(s) - 1)
     hi = min(lo + 1, len(s) - 1)
     return s[lo] + (s[hi] - s[lo]) * (rank - lo)
 
PATCH
    ;;
    b2) cat <<'PATCH'
--- a/src/leverbench/analysis/load.py
+++ b/src/leverbench/analysis/load.py
@@ -90,7 +90,7 @@
     a = a[~np.isnan(a)]
     if a.size == 0:
         return None
-    ps = np.percentile(a, PCTS)
+    ps = np.percentile(a, PCTS, method="higher")
     out: dict[str, float] = {"n": int(a.size)}
     for p, v in zip(PCTS, ps):
         out[f"p{p}"] = float(v)
PATCH
    ;;
    c1) cat <<'PATCH'
--- a/src/leverbench/analysis/guard.py
+++ b/src/leverbench/analysis/guard.py
@@ -45,9 +45,6 @@
         if cell.get("failed_calls"):
             reasons.append(f"{who} has {cell['failed_calls']} failed call(s)")
             blocks_total = True
-        if cell.get("retried_calls"):
-            reasons.append(f"{who} has {cell['retried_calls']} retried call(s)")
-            blocks_total = True
     if blocked_by:
         reasons.append("cells without a usable comparison: " + ", ".join(s.removeprefix("case:") for s in blocked_by))
     vb, va = base.get("output_tokens_median"), arm.get("output_tokens_median")
PATCH
    ;;
    c2) cat <<'PATCH'
--- a/src/leverbench/analysis/dataset.py
+++ b/src/leverbench/analysis/dataset.py
@@ -206,7 +206,7 @@
     num = cols.numbers
     return CallTable(
         arm=_relabel(cols, "arm", arm_names), case=_relabel(cols, "case", case_names), turn=turn,
-        ok=~cols.failed, retried=cols.flags["retried"], empty_answer=cols.flags["empty_answer"],
+        ok=~cols.failed | cols.flags["retried"], retried=cols.flags["retried"], empty_answer=cols.flags["empty_answer"],
         has_timings=cols.has_timings,
         **{k: num[k] for k in ("step", "latency_s", "ttft_s", "t_first_answer_s", "prompt_tokens", "completion_tokens",
                                "cached_tokens", "reasoning_tokens", "content_chars", "reasoning_chars",
PATCH
    ;;
    c3) cat <<'PATCH'
--- a/src/leverbench/analysis/load.py
+++ b/src/leverbench/analysis/load.py
@@ -272,7 +272,7 @@
     """The row of one (arm, stage) from its records (warm-up included in ``rs``; left out of the latencies)."""
     r0 = rs[0]
     arm, stage = r0["arm"], r0["stage"]
-    final = [r for r in rs if not r.get("retried")]
+    final = list(rs)
     c = columns(final)
     warm = np.array([bool(r.get("warmup")) for r in final], dtype=bool)
     failed_all = np.array([r.get("error") is not None for r in final], dtype=bool)
PATCH
    ;;
    d) cat <<'PATCH'
--- a/src/leverbench/runner/run.py
+++ b/src/leverbench/runner/run.py
@@ -178,7 +178,8 @@
             will_retry = out["error"] is not None and attempt < self.retries and out["error"]["class"] != "engine_died"
             if will_retry:
                 out["retried"] = True
-            await self._append(out)
+            if out["error"] is None:
+                await self._append(out)
             if not will_retry:
                 break
         out["_content"] = content
PATCH
    ;;
    e) cat <<'PATCH'
--- a/src/leverbench/report/html.py
+++ b/src/leverbench/report/html.py
@@ -40,7 +40,7 @@
 __all__ = ["render_html", "render_replay", "replay_data", "script_json", "CSP"]
 
 _TEMPLATES = Path(__file__).with_name("templates")
-_env = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=True, undefined=StrictUndefined,
+_env = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=False, undefined=StrictUndefined,
                    trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
 
 _SCRIPT = (_TEMPLATES / "replay.js").read_text(encoding="utf-8")
PATCH
    ;;
    *) echo "mutation-check: unknown mutation $1" >&2; exit 2 ;;
  esac
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
  if ! patch_of "$name" | (cd "$dir" && git apply -C1 --whitespace=nowarn -) 2>"$dir.apply"; then
    echo "mutation-check: mutation $name ($what) no longer applies; update its patch in $0:" >&2
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
