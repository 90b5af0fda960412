"""`spec.fleet`: worker clusters and per-cluster tenant quotas, as `quotaguard validate` checks
them, each problem at its FILE:LINE:COLUMN."""

from __future__ import annotations

import textwrap

from quotaguard.policy.loader import load_policy_documents, load_policy_text

BASE = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata: {name: p}
    spec:
      gpuClasses:
        - {name: h100, resource: nvidia.com/gpu, memory: 80Gi}
      tenants:
        - name: research
          namespaces: [research]
          quota: {h100: {guaranteed: 4, max: 24}}
    """
)


def with_fleet(fleet: str) -> str:
    return BASE + "  fleet:\n" + textwrap.indent(textwrap.dedent(fleet), "    ")


def problems(fleet: str) -> list[str]:
    text = with_fleet(fleet)
    return [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]


def test_a_fleet_with_kubeconfig_secrets_and_a_per_cluster_quota_is_read() -> None:
    policy = load_policy_text(
        with_fleet(
            """\
            clusters:
              - name: east
                kubeConfig: {location: east-kubeconfig}
                tenants: {research: {h100: {guaranteed: 2, max: 8}}}
              - name: west
                kubeConfig: {locationType: Path, location: /etc/fleet/west}
            """
        )
    )
    fleet = policy.spec.fleet
    assert fleet is not None and fleet.mode == "recommend"
    assert [c.name for c in fleet.clusters] == ["east", "west"]
    assert fleet.clusters[0].kube_config is not None
    assert fleet.clusters[0].kube_config.location_type == "Secret"
    quota = fleet.cluster_quota("east", "research", "h100")
    assert quota is not None and (quota.guaranteed, quota.max) == (2, 8)
    assert fleet.cluster_quota("west", "research", "h100") is None


def test_a_multikueue_config_names_the_workers_instead_of_a_list() -> None:
    assert problems("multiKueueConfig: gpu-fleet\n") == []


def test_a_fleet_naming_no_worker_is_refused() -> None:
    assert problems("mode: apply\n") == [
        "p.yaml:12:5: spec.fleet: a fleet names its worker clusters: list them in clusters, "
        "or name the MultiKueueConfig to read them from in multiKueueConfig"
    ]


def test_every_problem_of_the_clusters_is_located() -> None:
    found = problems(
        """\
        clusters:
          - name: east
            kubeConfig: {location: east-kubeconfig}
            tenants:
              research: {h100: {guaranteed: 5, max: 3}, a100: {max: 1}}
              nobody: {}
          - name: east
          - name: West
            kubeConfig: {locationType: Cloud, location: x}
        """
    )
    assert found == [
        "p.yaml:10:34: spec.tenants[0].quota.h100.guaranteed: the per-cluster guarantees of "
        "spec.fleet.clusters add up to 5 h100, over the tenant's fleet guarantee of 4: raise "
        "it, or lower them",
        "p.yaml:16:41: spec.fleet.clusters[0].tenants.research.h100.guaranteed: guaranteed 5 "
        "is over max 3",
        "p.yaml:16:59: spec.fleet.clusters[0].tenants.research.a100: no GPU class 'a100' in "
        "spec.gpuClasses (classes: h100)",
        "p.yaml:17:19: spec.fleet.clusters[0].tenants.nobody: no tenant 'nobody' in "
        "spec.tenants (tenants: research)",
        "p.yaml:18:9: spec.fleet.clusters[1]: cluster 'east' has no kubeConfig and no "
        "multiKueueConfig names it: quotaguard cannot reach it",
        "p.yaml:18:15: spec.fleet.clusters[1].name: cluster 'east' is listed twice",
        "p.yaml:19:15: spec.fleet.clusters[2].name: must be a DNS label: lower-case letters, "
        "digits and '-', beginning and ending with a letter or digit (not 'West')",
        "p.yaml:20:36: spec.fleet.clusters[2].kubeConfig.locationType: must be 'Secret' or 'Path'",
    ]


def test_a_fleet_needs_kueue() -> None:
    text = with_fleet("multiKueueConfig: gpu-fleet\n").replace(
        "spec:\n", "spec:\n  backend: volcano\n"
    )
    found = [str(p) for d in load_policy_documents(text, "p.yaml") for p in d.problems]
    assert found == [
        "p.yaml:13:5: spec.fleet: a fleet is a MultiKueue fleet: it needs backend: kueue"
    ]


def test_a_worker_may_not_be_called_manager() -> None:
    found = problems(
        """\
        clusters:
          - name: manager
            kubeConfig: {location: m}
        """
    )
    assert found == [
        "p.yaml:13:15: spec.fleet.clusters[0].name: 'manager' names the manager cluster (in "
        "metrics and snapshot directories); name the worker otherwise"
    ]
