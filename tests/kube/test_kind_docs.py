"""The table of workload kinds in README.md and docs/policy.md is the kind table's own: a row
added to `quotaguard.kube.kinds` and not to the docs fails here, with the table to paste."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quotaguard.kube.kinds import KINDS, Kind, TemplatePath

ROOT = Path(__file__).resolve().parents[2]
_LIST_STEP = re.compile(r"\[[A-Za-z]+\]")
BEGIN, END = "<!-- kinds table: begin -->", "<!-- kinds table: end -->"


def _path(place: TemplatePath) -> str:
    if not place.path:
        return "the object itself"
    spelt = _LIST_STEP.sub("[]", place.path).replace("{}", "{*}")
    text = f"`{spelt}`"
    if place.form == "resources":
        text += " (each node's resources)"
    elif place.form == "spark-role":
        text += " (`template`, `sidecars`, `initContainers`, `gpu`)"
    return text


def _templates(kind: Kind) -> str:
    if kind.components is not None:
        return f"`{kind.components}[]`, at each component's `podSets[].path`"
    return ", ".join(_path(place) for place in kind.templates)


def table() -> str:
    rows = [
        "| kind | apiVersion | pod templates | queue label |",
        "|---|---|---|---|",
    ]
    for kind in KINDS:
        labels = ", ".join(f"`{path}`" for path in kind.queue_labels)
        rows.append(
            f"| {kind.kind} | {', '.join(f'`{v}`' for v in kind.api_versions)} | "
            f"{_templates(kind)} | {labels} |"
        )
    return "\n".join(rows)


@pytest.mark.parametrize("doc", ["README.md", "docs/policy.md"])
def test_the_docs_list_every_kind_of_the_table(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert BEGIN in text and END in text, f"{doc} has no kinds table"
    found = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert found == table(), f"{doc}: replace the kinds table with\n{table()}"
