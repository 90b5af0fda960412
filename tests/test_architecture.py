"""The code keeps its shape: the layer contract of pyproject.toml and the complexity limit."""

import subprocess
import sys
from pathlib import Path

from tools.complexity import MAX_COMPLEXITY, complexities, problems

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(no_cache=True, no_logo=True))"
)


def test_every_import_follows_the_layer_contract() -> None:
    # In a child process: import-linter configures logging, which other tests read.
    run = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Contracts: 1 kept, 0 broken." in run.stdout, run.stdout + run.stderr
    assert run.returncode == 0


def test_no_function_is_more_complex_than_the_limit() -> None:
    found = complexities()
    assert len(found) > 500  # the whole package was read
    assert problems(found) == [], f"cyclomatic complexity above {MAX_COMPLEXITY}"
