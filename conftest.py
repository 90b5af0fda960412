"""How the test run shares the cores (pytest-xdist, `-n auto` in pyproject): every e2e test
on one worker, in file order, since they share the session's control plane; tests/ spread over
all workers one test at a time. (xdist's own `--dist loadgroup` marks do not reach its
scheduler under pytest 9, which ignores the node id it rewrites.)"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class E2eTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return "e2e" if nodeid.startswith("e2e/") else nodeid

    return E2eTogether(config, log)
