"""`spec.scheduling.schedulerName` as `quotaguard validate` judges it."""

from __future__ import annotations

import pytest

from quotaguard.policy.loader import load_policy_documents, load_policy_text
from quotaguard.policy.problems import PolicyInvalid
from tests.policy.test_validate import BASE


def with_scheduling(name: str, backend: str = "kueue") -> str:
    extra = f"  backend: {backend}\n  scheduling:\n    schedulerName: {name}\n"
    return BASE.replace("spec:\n", f"spec:\n{extra}", 1)


def problems(text: str) -> list[str]:
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def test_the_packing_profile_is_taken() -> None:
    policy = load_policy_text(with_scheduling("quotaguard-gpu"))
    assert policy.spec.scheduling is not None
    assert policy.spec.scheduling.scheduler_name == "quotaguard-gpu"
    assert problems(with_scheduling("quotaguard-gpu")) == []


def test_under_volcano_it_is_an_error_located_at_the_field() -> None:
    (found,) = problems(with_scheduling("quotaguard-gpu", backend="volcano"))
    assert "spec.scheduling.schedulerName" in found
    assert "binpack" in found and ": warning:" not in found
    with pytest.raises(PolicyInvalid):
        load_policy_text(with_scheduling("quotaguard-gpu", backend="volcano"))


def test_naming_the_default_scheduler_is_a_warning() -> None:
    (found,) = problems(with_scheduling("default-scheduler"))
    assert ": warning:" in found and "spreads pods" in found


@pytest.mark.parametrize("bad", ["Quotaguard_GPU", "-gpu", '""'])
def test_a_name_that_is_not_a_scheduler_name_is_refused(bad: str) -> None:
    (found,) = problems(with_scheduling(bad))
    assert "spec.scheduling.schedulerName" in found
