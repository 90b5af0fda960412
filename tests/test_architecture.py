"""The code keeps its shape: the layer contract of pyproject.toml and the complexity limit."""

import re
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
    assert re.search(r"Contracts: \d+ kept, 0 broken\.", run.stdout), run.stdout + run.stderr
    assert "one answer KEPT" in run.stdout
    assert run.returncode == 0


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = [stack.pop()]
                while group[-1] != node:
                    group.append(stack.pop())
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_when_it_runs() -> None:
    # Imports for annotations only (under TYPE_CHECKING) are left out: they never run.
    import grimp

    graph = grimp.build_graph("quotaguard", exclude_type_checking_imports=True, cache_dir=None)
    edges = {name: graph.find_modules_directly_imported_by(name) for name in graph.modules}
    assert len(edges) > 100
    assert _cycles(edges) == []


def test_no_function_is_more_complex_than_the_limit() -> None:
    found = complexities()
    assert len(found) > 500  # the whole package was read
    assert problems(found) == [], f"cyclomatic complexity above {MAX_COMPLEXITY}"


MAX_MODULE_LINES = 600


def test_no_module_is_longer_than_a_newcomer_reads_at_once() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "quotaguard").rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_module_names_say_what_they_are_without_their_folder() -> None:
    # Two modules of one name in two packages read the same in a traceback or an import list.
    # Kept: the CLI verbs `validate`, `trace` and `registrations` beside admission's,
    # simulate's and webhook's, and `names` of admission and kube.
    kept = {"__init__.py", "validate.py", "trace.py", "names.py", "registrations.py"}
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "quotaguard").rglob("*.py")):
        seen.setdefault(path.name, []).append(str(path.parent.relative_to(ROOT)))
    assert {
        name: where for name, where in seen.items() if len(where) > 1 and name not in kept
    } == {}
