"""The quota controller with `backend: volcano`: Volcano Queues (scheduling.volcano.sh/v1beta1)
get spec.weight, capability (= max), guarantee.resource (= guaranteed) and deserved (= the
target), moving in bounded steps as PodGroups ask for more. The Volcano CRDs of the harness are
schema-less stand-ins (e2e/README.md): the API server stores what is written without checking it
against Volcano's schema, so these tests check the values, not their admission."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.build import Toolchain
from e2e.cluster import Cluster
from e2e.kueue import (
    DISTRIBUTABLE,
    EtcdHistory,
    Version,
    apply_volcano_samples,
    converged,
    own_gpu_cluster,
    pod_group,
    policy_document,
    policy_quotas,
    report_rows,
    resource_versions,
    running_controller,
    step_allowed,
    wait_for_report,
    write_document,
)

QUEUES = "queues.scheduling.volcano.sh"
MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture(scope="module")
def vcluster(toolchain: Toolchain) -> Iterator[Cluster]:
    with own_gpu_cluster(toolchain, kueue_samples=False) as cluster:
        for namespace in ("inference", "training", "notebooks"):
            cluster.create_namespace(namespace)
        yield cluster


def volcano_policy(directory: Path, **rebalance: Any) -> tuple[Path, dict[str, Any]]:
    settings: dict[str, Any] = {"interval": "1s", "demandWindow": "4s", "mode": "apply"}
    document = policy_document(**{**settings, **rebalance})
    document["spec"]["backend"] = "volcano"
    return write_document(directory / "volcano-policy.yaml", document), document


def queues(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {q["metadata"]["name"]: q for q in cluster.get(QUEUES)["items"]}


def amount(resources: Any, resource: str) -> int:
    return int(str((resources or {}).get(resource, "0")))


def fields_match_report(cluster: Cluster, report: dict[str, Any]) -> list[str]:
    """Differences between the Queues and the report: deserved = target, guarantee =
    guaranteed, capability = max, weight = the adjusted weight rounded (at least 1)."""
    held = queues(cluster)
    differences = []
    for tenant in report["tenants"]:
        spec = held[tenant["queue"]]["spec"]
        if spec.get("weight") != max(1, round(tenant["weight"])):
            differences.append(f"{tenant['queue']}: weight {spec.get('weight')}")
        for row in tenant["classes"]:
            resource, where = row["resource"], f"{tenant['queue']}/{row['class']}"
            wanted = {
                "deserved": row["target"],
                "guarantee": row["guaranteed"],
                "capability": row["max"],
            }
            found = {
                "deserved": amount(spec.get("deserved"), resource),
                "guarantee": amount((spec.get("guarantee") or {}).get("resource"), resource),
                "capability": amount(spec.get("capability"), resource),
            }
            if found != wanted:
                differences.append(f"{where}: holds {found}, report wants {wanted}")
    return differences


def volcano_history_problems(versions: list[Version], policy: dict[str, Any]) -> list[str]:
    """Per version: deserved within [guaranteed, max], guarantee and capability as the policy
    says, deserved moving in bounded steps; per class, deserved summed over the queues within the
    distributable capacity."""
    quotas = policy_quotas(policy)
    rebalance = policy["spec"]["rebalance"]
    classes = {c["name"]: c["resource"] for c in policy["spec"]["gpuClasses"]}
    latest: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for version in sorted(versions, key=lambda v: v.resource_version):
        if version.name not in quotas:
            continue
        if version.event == "DELETE":
            latest.pop(version.name, None)
            continue
        spec, where = version.obj.get("spec") or {}, f"{version.name}@{version.resource_version}"
        before = latest.get(version.name)
        for class_name, quota in quotas[version.name].items():
            resource = classes[class_name]
            deserved = amount(spec.get("deserved"), resource)
            guarantee = amount((spec.get("guarantee") or {}).get("resource"), resource)
            if not quota["guaranteed"] <= deserved <= quota["max"]:
                problems.append(f"{where}: {class_name} deserved {deserved} outside {quota}")
            if guarantee != quota["guaranteed"]:
                problems.append(f"{where}: {class_name} guarantee {guarantee}")
            if amount(spec.get("capability"), resource) != quota["max"]:
                problems.append(f"{where}: {class_name} capability {spec.get('capability')}")
            if before is not None:
                old = amount(before.get("deserved"), resource)
                if abs(deserved - old) > step_allowed(old, rebalance):
                    problems.append(f"{where}: {class_name} moved {old} -> {deserved}")
        latest[version.name] = spec
        for class_name, resource in classes.items():
            total = sum(amount(s.get("deserved"), resource) for s in latest.values())
            if total > DISTRIBUTABLE[class_name]:
                problems.append(f"{where}: {class_name} deserved sum {total} > distributable")
    return problems


def test_volcano_queues_get_weight_capability_guarantee_and_deserved(
    vcluster: Cluster, tmp_path: Path
) -> None:
    cluster = vcluster
    apply_volcano_samples(cluster)
    policy, document = volcano_policy(tmp_path)
    parent_before = queues(cluster)["gpu-pool"]
    history = EtcdHistory(cluster, prefix="/registry/scheduling.volcano.sh/queues/").begin()
    with running_controller(
        cluster, policy, identity="volcano", lease_namespace="lease-volcano"
    ) as thread:

        def fetch() -> dict[str, Any] | None:
            report: dict[str, Any] | None = thread.controller.latest_report()
            return report

        idle = wait_for_report(fetch, converged, timeout=40, what="Volcano queues converged")
        assert fields_match_report(cluster, idle) == []
        idle_target = report_rows(idle)[("inference", "h100-1g.10gb")]["target"]
        assert idle_target < DISTRIBUTABLE["h100-1g.10gb"]

        # A PodGroup of inference asks for every 1g.10gb slice.
        cluster.create(pod_group("serve-all", "inference", "inference", {MIG: 28}))

        def inference_takes_it_all(report: dict[str, Any]) -> bool:
            row = report_rows(report)[("inference", "h100-1g.10gb")]
            return converged(report) and row["target"] == DISTRIBUTABLE["h100-1g.10gb"]

        busy = wait_for_report(fetch, inference_takes_it_all, timeout=60, what="inference 26")
        assert report_rows(busy)[("inference", "h100-1g.10gb")]["pending"] == 28
        assert fields_match_report(cluster, busy) == []
        held = queues(cluster)
        assert amount(held["inference"]["spec"]["deserved"], MIG) == 26
        assert amount(held["notebooks"]["spec"]["deserved"], MIG) == 0
        # the parent is the policy's cohort; what quotaguard does not manage stays as it was
        assert held["inference"]["spec"]["parent"] == "gpu-pool"
        assert held["inference"]["spec"]["reclaimable"] is True
        assert held["gpu-pool"]["spec"] == parent_before["spec"]
        assert (
            held["gpu-pool"]["metadata"]["resourceVersion"]
            == parent_before["metadata"]["resourceVersion"]
        )

        # Nothing changes any more: no writes over several intervals.
        before = resource_versions(cluster, QUEUES)
        planned = thread.controller.status.planned
        assert thread.wait_for(lambda c: c.status.planned >= planned + 4, timeout=20)
        assert resource_versions(cluster, QUEUES) == before

        cluster.kubectl("delete", "podgroups.scheduling.volcano.sh", "--all", "-n", "inference")
        drained = wait_for_report(
            fetch,
            lambda r: (
                converged(r)
                and report_rows(r)[("inference", "h100-1g.10gb")]["target"] == idle_target
            ),
            timeout=60,
            what="inference back to its idle share",
        )
        assert fields_match_report(cluster, drained) == []
        status = thread.controller.status
        assert status.writes.get("error", 0) == 0 and status.writes.get("conflict", 0) == 0

    versions = history.versions()
    deserved = [
        amount(v.obj["spec"].get("deserved"), MIG)
        for v in versions
        if v.name == "inference" and v.event == "PUT"
    ]
    assert max(deserved) == 26 and deserved[-1] == idle_target
    problems = volcano_history_problems(versions, document)
    assert not problems, "\n".join(problems)


def test_volcano_recommend_mode_writes_nothing(vcluster: Cluster, tmp_path: Path) -> None:
    cluster = vcluster
    apply_volcano_samples(cluster)
    policy, _ = volcano_policy(tmp_path, mode="recommend")
    before = resource_versions(cluster, QUEUES)
    with running_controller(
        cluster, policy, identity="volcano-recommend", lease_namespace="lease-volcano-rec"
    ) as thread:
        assert thread.wait_for(lambda c: c.status.planned >= 5, timeout=30)
        report = thread.controller.latest_report()
        assert report is not None and report["mode"] == "recommend"
        rows = report_rows(report)
        assert any(row["target"] != row["guaranteed"] for row in rows.values())
        assert resource_versions(cluster, QUEUES) == before
        assert thread.controller.status.written == 0


DRA_TENANT = "vc-dra"
DRA_NODE = "vc-dra-h100-0"
DRA_POLICY = f"""\
apiVersion: quotaguard.dev/v1alpha1
kind: TenantPolicy
metadata: {{name: volcano-dra-e2e}}
spec:
  backend: volcano
  gpuClasses:
    - name: h100
      memory: 80Gi
      dra: {{deviceClassName: gpu.nvidia.com}}
  tenants:
    - name: {DRA_TENANT}
      namespaces: [{DRA_TENANT}]
      queue: {DRA_TENANT}
      quota: {{h100: {{guaranteed: 1, max: 8}}}}
  rebalance: {{mode: apply, interval: 1s, maxStepPercent: 100, usableCapacityPercent: 100}}
"""


def claim_pod(name: str, group: str) -> dict[str, Any]:
    """A pod of a Volcano PodGroup asking one GPU by a ResourceClaimTemplate only."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": DRA_TENANT,
            "annotations": {"scheduling.k8s.io/group-name": group},
        },
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example/train:1",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


def test_volcano_podgroups_pods_asking_by_claims_are_demand(
    vcluster: Cluster, tmp_path: Path
) -> None:
    """Volcano sums a PodGroup's minResources from container resources, not claims: the
    group's GPUs asked through DRA come from its pods, and the Queue's deserved follows."""
    from e2e import draslices
    from e2e.cluster import gpu_node

    cluster = vcluster
    cluster.add_nodes(gpu_node(DRA_NODE, {}))
    cluster.apply(draslices.device_classes())
    cluster.apply(draslices.whole_gpus(DRA_NODE, 8))
    cluster.create_namespace(DRA_TENANT)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": DRA_TENANT},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            }
        },
    }
    cluster.apply([template])
    cluster.create(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": DRA_TENANT},
            "spec": {"weight": 1, "reclaimable": True},
        }
    )
    cluster.create(pod_group("train", DRA_TENANT, DRA_TENANT, {}))
    for index in range(5):
        cluster.create(claim_pod(f"train-{index}", "train"))
    policy = tmp_path / "volcano-dra.yaml"
    policy.write_text(DRA_POLICY)
    resource = "deviceclass/gpu.nvidia.com"
    with running_controller(
        cluster, policy, identity="volcano-dra", lease_namespace="lease-volcano-dra"
    ) as thread:

        def fetch() -> dict[str, Any] | None:
            report: dict[str, Any] | None = thread.controller.latest_report()
            return report

        def five_wanted(report: dict[str, Any]) -> bool:
            row = report_rows(report).get((DRA_TENANT, "h100"))
            return converged(report) and row is not None and row["pending"] == 5

        busy = wait_for_report(fetch, five_wanted, timeout=60, what="5 GPUs asked by claims")
        row = report_rows(busy)[(DRA_TENANT, "h100")]
        assert (row["usage"], row["pending"]) == (0, 5)
        assert row["reason"].endswith("demand 5")
        spec = queues(cluster)[DRA_TENANT]["spec"]
        assert amount(spec.get("deserved"), resource) == row["target"] >= 5
        assert amount(spec.get("capability"), resource) == 8
