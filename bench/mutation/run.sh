#!/usr/bin/env bash
# Mutation testing of the core (not part of CI: it takes tens of minutes on 2 cores).
#
#   bash bench/mutation/run.sh quota      # quota/fill, planner, step, diff against tests/quota
#   bash bench/mutation/run.sh admission  # admission/validate, mutate against tests/admission
#
# Runs mutmut 3 (pip install 'mutmut>=3,<4') niced, in a copy of the committed tree under
# ${WORK:-/tmp/quotaguard-mutation}, so the worktree is left alone; writes the counts to
# bench/mutation/results-<target>.txt and the survivors (with their diffs) beside them.
# PATHS (comma-separated) narrows or widens the mutated files; MUTATION_TIMEOUT bounds the run;
# CHILDREN (default 1) runs that many mutants at once; MUTATION_EXAMPLES (default 10) caps Hypothesis;
# RESUME=1 goes on with a stopped run in the same WORK.
# Results and the equivalent mutants are in bench/mutation/README.md.
set -euo pipefail
target="${1:?quota or admission}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
work="${WORK:-/tmp/quotaguard-mutation}/$target"
case "$target" in
  quota)
    paths="${PATHS:-quotaguard/quota/fill.py,quotaguard/quota/planner.py,quotaguard/quota/step.py,quotaguard/quota/diff.py}"
    tests="tests/quota" ;;
  admission)
    paths="${PATHS:-quotaguard/admission/validate.py,quotaguard/admission/mutate.py}"
    tests="tests/admission" ;;
  *) echo "unknown target $target" >&2; exit 2 ;;
esac
if [ -n "${RESUME:-}" ]; then
  # a run that was stopped goes on: mutmut keeps every verdict in $work/mutants; with
  # FROM_WORKTREE the worktree's tests replace the copy's (mutmut runs its stats for new tests)
  test -d "$work/mutants"
  if [ -n "${FROM_WORKTREE:-}" ]; then
    (cd "$repo" && git ls-files -co --exclude-standard tests | tar -cf - -T -) | tar -x -C "$work"
  fi
else
  rm -rf "$work" && mkdir -p "$work"
  if [ -n "${FROM_WORKTREE:-}" ]; then
    # the tree as it is on disk (uncommitted tests included)
    (cd "$repo" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -x -C "$work"
  else
    git -C "$repo" archive HEAD | tar -x -C "$work"
  fi
fi
cd "$work"
# mutmut reads [tool.mutmut] from pyproject.toml before setup.cfg: keep the project's out of it
python - <<'PY'
import pathlib, re
p = pathlib.Path("pyproject.toml")
p.write_text(re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[)", "", p.read_text()))
PY
# Hypothesis, derandomized (a mutant's verdict must not depend on luck), patient (mutmut traces
# every call while it collects which tests reach which function, on a loaded machine) and short:
# every property test draws at most MUTATION_EXAMPLES examples, also those whose own settings ask
# for more. tests/conftest.py loads the profile HYPOTHESIS_PROFILE names, so it must be this one.
# No shrinking: a failing example kills the mutant as it is, the smallest one is not needed.
export HYPOTHESIS_PROFILE=mutation
cat > conftest.py <<'PY'
import os

from hypothesis import HealthCheck, Phase, settings

EXAMPLES = int(os.environ.get("MUTATION_EXAMPLES", "10"))
PATIENT = {
    "derandomize": True,
    "deadline": None,
    "database": None,
    "suppress_health_check": list(HealthCheck),
    "phases": [Phase.explicit, Phase.generate],
}
settings.register_profile("mutation", max_examples=EXAMPLES, **PATIENT)
settings.load_profile("mutation")


def pytest_collection_modifyitems(items):
    for item in items:
        test = getattr(item, "obj", None)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is not None:
            test._hypothesis_internal_use_settings = settings(
                own, max_examples=min(own.max_examples, EXAMPLES), **PATIENT
            )
PY
{
  echo "[mutmut]"
  echo "source_paths = quotaguard"
  echo "only_mutate ="
  tr ',' '\n' <<<"$paths" | sed 's/^/    /'
  echo "pytest_add_cli_args = -p no:cacheprovider -q"
  echo "pytest_add_cli_args_test_selection = $tests"
  # CPU seconds per mutant: (its tests' wall time in the first pass + 1) x 2 x this, ten times
  # what they need (an endless loop costs no more); the wall-clock bound is half that times
  # WALL_FACTOR (patient_mutmut.py), so that a loaded machine does not make timeouts
  echo "timeout_multiplier = ${TIMEOUT_MULTIPLIER:-5}"
  echo "also_copy ="
  echo "    conftest.py"
  echo "    config"
  echo "    tools"
  echo "    bench"
} > setup.cfg
# MUTATION_TIMEOUT (wall seconds) stops the whole run early; unset, it runs to the end
limit=()
[ -n "${MUTATION_TIMEOUT:-}" ] && limit=(timeout "$MUTATION_TIMEOUT")
# MUTANTS (space-separated names or globs) runs only those again, e.g. with new tests
# (FROM_WORKTREE=1 and another WORK), and leaves results-<target>.txt alone
read -ra names <<<"${MUTANTS:-}"
"${limit[@]}" nice -n 19 python "$repo/bench/mutation/patient_mutmut.py" run \
  --max-children "${CHILDREN:-1}" "${names[@]}" || true
if [ -n "${MUTANTS:-}" ]; then
  exit 0
fi
python -m mutmut results > survivors.txt || true
python - "$repo/bench/mutation/results-$target.txt" <<'PY'
import json, pathlib, sys
from collections import Counter
from mutmut.stats import status_by_exit_code
counts = Counter()
for meta in pathlib.Path("mutants").rglob("*.meta"):
    data = json.loads(meta.read_text())
    for name, code in data.get("exit_code_by_key", {}).items():
        counts[status_by_exit_code[code]] += 1
total = sum(counts.values())
lines = [f"{key}: {value}" for key, value in sorted(counts.items())]
lines.append(f"total: {total}")
caught = counts["killed"] + counts["timeout"]
if caught + counts["survived"]:
    lines.append(f"killed of those run: {caught / (caught + counts['survived']):.1%}")
out = pathlib.Path(sys.argv[1])
out.write_text("\n".join(lines) + "\n")
print(out.read_text())
PY
grep -v ': killed' survivors.txt | head -300
