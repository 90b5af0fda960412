#!/usr/bin/env bash
# Mutation testing of the core (not part of CI: it takes tens of minutes on 2 cores).
#
#   bash bench/mutation/run.sh quota      # quota/fill, planner, step, diff against tests/quota
#   bash bench/mutation/run.sh admission  # admission/validate, mutate against tests/admission
#
# Runs mutmut 3 (pip install 'mutmut>=3,<4') niced, in a copy of the committed tree under
# ${WORK:-/tmp/quotaguard-mutation}, so the worktree is left alone; writes the counts to
# bench/mutation/results-<target>.txt and the survivors (with their diffs) beside them.
# PATHS (comma-separated) narrows or widens the mutated files; MUTATION_TIMEOUT bounds the run.
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
rm -rf "$work" && mkdir -p "$work"
if [ -n "${FROM_WORKTREE:-}" ]; then
  # the tree as it is on disk (uncommitted tests included)
  (cd "$repo" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -x -C "$work"
else
  git -C "$repo" archive HEAD | tar -x -C "$work"
fi
cd "$work"
# mutmut reads [tool.mutmut] from pyproject.toml before setup.cfg: keep the project's out of it
python - <<'PY'
import pathlib, re
p = pathlib.Path("pyproject.toml")
p.write_text(re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[)", "", p.read_text()))
PY
# Hypothesis, derandomized (a mutant's verdict must not depend on luck) and patient (mutmut
# traces every call while it collects which tests reach which function, on a loaded machine).
cat > conftest.py <<'PY'
from hypothesis import HealthCheck, settings

settings.register_profile(
    "mutation",
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=int(__import__("os").environ.get("MUTATION_EXAMPLES", "40")),
    suppress_health_check=list(HealthCheck),
)
settings.load_profile("mutation")
PY
{
  echo "[mutmut]"
  echo "source_paths = quotaguard"
  echo "only_mutate ="
  tr ',' '\n' <<<"$paths" | sed 's/^/    /'
  echo "pytest_add_cli_args = -p no:cacheprovider -q"
  echo "pytest_add_cli_args_test_selection = $tests"
  echo "also_copy ="
  echo "    conftest.py"
  echo "    config"
  echo "    tools"
  echo "    bench"
} > setup.cfg
timeout "${MUTATION_TIMEOUT:-3000}" nice -n 19 python -m mutmut run --max-children "${CHILDREN:-2}" || true
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
