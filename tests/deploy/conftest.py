"""One rendering of each build a session: kustomize and helm take most of this directory's
time, and several checks read the same build."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest

from tests.deploy.manifests import Manifest, Renders, render


@pytest.fixture(scope="session")
def renders(tmp_path_factory: pytest.TempPathFactory) -> Renders:
    """`manifests.render(tool, ..., components)`, each build rendered once; every call gets
    its own copy, so a check that edits what it reads changes no other check's build."""
    done: dict[tuple[str, tuple[str, ...]], list[Manifest]] = {}

    def rendered(tool: str, components: Sequence[str] = ()) -> list[Manifest]:
        key = (tool, tuple(components))
        if key not in done:
            done[key] = render(tool, tmp_path_factory.mktemp("overlay"), list(components))
        return copy.deepcopy(done[key])

    return rendered
