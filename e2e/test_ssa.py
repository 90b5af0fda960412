"""GitOps-safe queue writes through a real kube-apiserver with Kueue's CRDs: quotaguard writes its
ClusterQueue fields by server-side apply (field manager `quotaguard`), the fields another
manager applied (here `argocd-controller`, as Argo CD with server-side apply) stay as that
manager set them and stay its own, a re-sync of that manager changes nothing of quotaguard's,
and a field both want is reported as a conflict, never overwritten unless
`rebalance.forceConflicts` says so."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from e2e.build import Toolchain
from e2e.cluster import Cluster, wait_until
from e2e.kueue import (
    KUEUE_SAMPLES,
    converged,
    gpu_quotas,
    own_gpu_cluster,
    report_rows,
    reset_cluster_queues,
    running_controller,
    sample_documents,
    wait_for_report,
    write_policy,
)

ARGO = "argocd-controller"
TRACKING = "argocd.argoproj.io/tracking-id"


@pytest.fixture(scope="module")
def scluster(toolchain: Toolchain) -> Iterator[Cluster]:
    """A control plane of this module's own (nothing else writes queues), GPU nodes, samples."""
    with own_gpu_cluster(toolchain) as cluster:
        yield cluster


@pytest.fixture
def fresh(scluster: Cluster) -> Cluster:
    reset_cluster_queues(scluster)  # plain creates (kubectl create: no declared intent)
    return scluster


def argo_apply(cluster: Cluster, document: Mapping[str, Any], *, force: bool = False) -> Any:
    """`kubectl apply --server-side` as Argo CD's field manager; the CompletedProcess."""
    return cluster.kubectl(
        "apply",
        "--server-side",
        f"--field-manager={ARGO}",
        *(["--force-conflicts"] if force else []),
        "-f",
        "-",
        input=json.dumps(document),
        check=False,
    )


def owned(queue: Mapping[str, Any], manager: str) -> dict[str, Any]:
    """The fieldsV1 `manager` owns by apply (its Apply entries merged)."""
    fields: dict[str, Any] = {}
    for entry in queue["metadata"].get("managedFields") or ():
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            _merge(fields, entry.get("fieldsV1") or {})
    return fields


def _merge(into: dict[str, Any], more: Mapping[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, Mapping):
            _merge(into.setdefault(key, {}), value)
        else:
            into[key] = value


def owns(fields: Mapping[str, Any], *path: str) -> bool:
    node: Any = fields
    for key in path:
        if not isinstance(node, Mapping) or f"f:{key}" not in node:
            return False
        node = node[f"f:{key}"]
    return True


def sample(name: str) -> dict[str, Any]:
    for document in sample_documents(KUEUE_SAMPLES, "clusterqueues.yaml"):
        if document["metadata"]["name"] == name:
            return copy.deepcopy(document)
    raise KeyError(name)


def queue(cluster: Cluster, name: str) -> dict[str, Any]:
    """The ClusterQueue with its managedFields (kubectl hides them unless asked)."""
    found = cluster.kubectl(
        "get", "clusterqueue", name, "-o", "json", "--show-managed-fields"
    ).stdout
    result: dict[str, Any] = json.loads(found)
    return result


def holds_report(cluster: Cluster, report: Mapping[str, Any], queue_name: str) -> bool:
    held = gpu_quotas(queue(cluster, queue_name))
    return all(
        held.get((row["flavor"], row["resource"]), {}).get("nominalQuota") == row["target"]
        for (name, _), row in report_rows(report).items()
        if name == queue_name
    )


def conflict_events(cluster: Cluster, queue_name: str) -> list[dict[str, Any]]:
    events = cluster.get("events", namespace="default")["items"]
    return [
        e
        for e in events
        if e.get("reason") == "QuotaConflict" and e["involvedObject"]["name"] == queue_name
    ]


# --------------------------------------------------------------------------------------------


def test_fields_another_manager_applied_survive_quotaguards_writes_and_its_resync(
    fresh: Cluster, tmp_path: Path
) -> None:
    cluster = fresh
    # A weight far off the policy's: quotaguard has something to write
    cluster.kubectl("delete", "clusterqueue", "training", "--wait")
    created = sample("training")
    created["spec"]["fairSharing"] = {"weight": "9"}
    cluster.create(created)
    # What Argo CD applies for training: preemption and queueing strategy from Git, its
    # tracking annotation; not the quotas (they are quotaguard's to move).
    git = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "training", "annotations": {TRACKING: "ml:kueue/training"}},
        "spec": {
            "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"},
            "queueingStrategy": "StrictFIFO",
        },
    }
    # --force-conflicts: Argo takes preemption over from the kubectl create that made the queue
    assert argo_apply(cluster, git, force=True).returncode == 0
    policy = write_policy(tmp_path, mode="apply")
    with running_controller(cluster, policy, identity="ssa", lease_namespace="lease-ssa") as t:
        report = wait_for_report(
            lambda: t.controller.latest_report(), converged, timeout=60, what="convergence"
        )
        assert holds_report(cluster, report, "training")
        assert t.controller.status.writes.get("conflict", 0) == 0
        assert t.controller.status.writes.get("updated", 0) >= 1
        written = queue(cluster, "training")
        preemption = written["spec"]["preemption"]  # Kueue's defaults added to Argo's
        assert preemption.items() >= git["spec"]["preemption"].items()
        assert written["spec"]["queueingStrategy"] == "StrictFIFO"
        assert written["metadata"]["annotations"][TRACKING] == "ml:kueue/training"

        ours, argos = owned(written, "quotaguard"), owned(written, ARGO)
        assert owns(ours, "spec", "resourceGroups"), written["metadata"]["managedFields"]
        assert owns(ours, "spec", "cohortName")
        assert owns(ours, "spec", "fairSharing", "weight")
        assert not owns(ours, "spec", "preemption")
        assert not owns(ours, "spec", "queueingStrategy")
        assert owns(argos, "spec", "preemption") and owns(argos, "spec", "queueingStrategy")
        assert not owns(argos, "spec", "resourceGroups")

        # Argo re-syncs (no force): no conflict, and quotaguard's quotas stay as they are.
        before = gpu_quotas(written), written["spec"]["fairSharing"]
        resync = argo_apply(cluster, git)
        assert resync.returncode == 0, resync.stderr
        after = queue(cluster, "training")
        assert (gpu_quotas(after), after["spec"]["fairSharing"]) == before


def test_a_field_another_manager_applied_is_reported_and_kept_until_forced(
    fresh: Cluster, tmp_path: Path
) -> None:
    cluster = fresh
    # Argo CD applies the whole notebooks queue from Git, resourceGroups included: Kueue's
    # resourceGroups is one atomic field, so the quotas are Argo's.
    git = sample("notebooks")
    git["metadata"]["annotations"] = {TRACKING: "ml:kueue/notebooks"}
    assert argo_apply(cluster, git, force=True).returncode == 0
    from_git = gpu_quotas(queue(cluster, "notebooks"))
    policy = write_policy(tmp_path, mode="apply")
    with running_controller(
        cluster, policy, identity="ssa-conflict", lease_namespace="lease-ssa-conflict"
    ) as t:

        def notebooks_conflict(report: dict[str, Any]) -> bool:
            rows = {tenant["queue"]: tenant for tenant in report["tenants"]}
            return bool(rows["notebooks"].get("conflicts")) and all(
                holds_report(cluster, report, name) for name in ("inference", "training")
            )

        report = wait_for_report(
            lambda: t.controller.latest_report(),
            notebooks_conflict,
            timeout=60,
            what="notebooks reported in conflict, the others written",
        )
        rows = {tenant["queue"]: tenant for tenant in report["tenants"]}
        # both own the list: Argo applied the value kubectl create had written
        conflicts = rows["notebooks"]["conflicts"]
        assert {"field": ".spec.resourceGroups", "manager": ARGO} in conflicts
        assert not holds_report(cluster, report, "notebooks")  # the plan wants a change
        assert gpu_quotas(queue(cluster, "notebooks")) == from_git
        outcome = next(o for o in t.controller.status.last_outcomes if o.queue == "notebooks")
        assert outcome.result == "conflict" and ARGO in (outcome.detail or "")
        events = wait_until(
            lambda: conflict_events(cluster, "notebooks"), timeout=10, what="QuotaConflict Event"
        )
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert f".spec.resourceGroups (owned by {ARGO})" in events[0]["message"]
        from quotaguard.metrics.registry import REGISTRY

        assert (
            REGISTRY.get_sample_value("quotaguard_queue_writes_total", {"result": "conflict"}) or 0
        ) > 0
        kept = queue(cluster, "notebooks")
        assert owns(owned(kept, ARGO), "spec", "resourceGroups")
        assert not owns(owned(kept, "quotaguard"), "spec", "resourceGroups")

    forcing = write_policy(tmp_path, "forcing.yaml", mode="apply", forceConflicts=True)
    with running_controller(
        cluster, forcing, identity="ssa-force", lease_namespace="lease-ssa-force"
    ) as t:
        report = wait_for_report(
            lambda: t.controller.latest_report(),
            lambda r: converged(r) and holds_report(cluster, r, "notebooks"),
            timeout=60,
            what="notebooks written with forceConflicts",
        )
        taken = queue(cluster, "notebooks")
        assert owns(owned(taken, "quotaguard"), "spec", "resourceGroups")
        assert not owns(owned(taken, ARGO), "spec", "resourceGroups")
        assert taken["metadata"]["annotations"][TRACKING] == "ml:kueue/notebooks"
