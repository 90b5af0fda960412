"""The namespace -> tenant memo stays bounded whatever namespaces the cluster holds."""

from pathlib import Path

from quotaguard.policy.loader import load_policy_file
from quotaguard.policy.model import NAMESPACE_MEMO

SAMPLE = Path(__file__).parents[2] / "config" / "policy.yaml"


def test_a_flood_of_namespaces_neither_grows_the_memo_nor_changes_answers() -> None:
    policy = load_policy_file(SAMPLE)
    tenant = policy.spec.tenants[0]
    owned = next(n for n in tenant.namespaces if "*" not in n)
    assert policy.tenant_of(owned) is tenant
    for i in range(NAMESPACE_MEMO + 50):
        assert policy.tenant_of(f"flood-{i}") is None
        policy.exempt(f"flood-{i}")
    assert policy._tenant_memo.cache_info().currsize == NAMESPACE_MEMO  # type: ignore[attr-defined]
    assert policy._exempt_memo.cache_info().currsize == NAMESPACE_MEMO  # type: ignore[attr-defined]
    # The flood pushed the tenant's namespace out, and it is still found.
    assert policy.tenant_of(owned) is tenant
    assert policy.exempt("kube-system")
