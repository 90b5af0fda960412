from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from quotaguard.policy.loader import load_policy_file, load_policy_text
from quotaguard.policy.model import TenantPolicy

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_POLICY = ROOT / "config" / "policy.yaml"


@pytest.fixture(scope="session")
def policy() -> TenantPolicy:
    """The sample policy: inference on MIG, training on whole H100s, notebooks shared."""
    return load_policy_file(SAMPLE_POLICY)


@pytest.fixture(scope="session")
def make_policy() -> Callable[..., TenantPolicy]:
    """The sample policy with `spec` fields replaced, checked by the real loader."""

    def build(**spec: object) -> TenantPolicy:
        document = yaml.safe_load(SAMPLE_POLICY.read_text())
        document["spec"].update(spec)
        return load_policy_text(yaml.safe_dump(document), "test-policy.yaml")

    return build
