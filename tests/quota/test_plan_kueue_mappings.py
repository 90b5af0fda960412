"""`plan --snapshot` of a DRA cluster under Kueue: the classes only claims reach are planned
under the resource names of Kueue's deviceClassMappings found in the snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quotaguard.cli import main
from tests.controller.test_dra_loop import (
    KUEUE_CONFIG,
    POLICY_TEXT,
    cluster_queue,
    gpu_slice,
    pending_workload,
    two_gpus,
)
from tests.controller.test_loop import node

DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {},
}


def admitted_workload() -> dict[str, Any]:
    """Admitted by Kueue: 2 GPUs of usage under the mapped name; its template is no longer in
    the snapshot, so only Kueue's count says what it holds."""
    found = pending_workload("served", "training", 1)
    found["spec"]["podSets"][0]["template"]["spec"]["resourceClaims"][0][
        "resourceClaimTemplateName"
    ] = "deleted"
    found["status"] = {
        "admission": {
            "clusterQueue": "training",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"example.com/gpu": "h100"},
                    "resourceUsage": {"example.com/gpu": "2"},
                }
            ],
        },
        "conditions": [
            {"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"},
        ],
    }
    return found


def snapshot(tmp_path: Path, *, kueue_config: bool) -> Path:
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Node", **node("gpu-1", "cpu", 64)},
        gpu_slice("gpu-1", 8),
        DEVICE_CLASS,
        two_gpus("training"),
        pending_workload("train", "training", 3),
        admitted_workload(),
    ]
    for tenant in ("training", "research"):
        queue = cluster_queue(tenant, "example.com/gpu")
        queue["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["nominalQuota"] = "3"
        items.append(queue)
    if kueue_config:
        items.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
                "data": {"controller_manager_config.yaml": KUEUE_CONFIG},
            }
        )
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def plan(tmp_path: Path, snapshot_file: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_TEXT.replace("mode: apply", "mode: recommend"))
    main(["plan", "--policy", str(policy), "--snapshot", str(snapshot_file), "-o", "json"])
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_plan_reads_kueues_mappings_from_the_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, _ = plan(tmp_path, snapshot(tmp_path, kueue_config=True), capsys)
    (h100,) = report["classes"]
    assert (h100["resource"], h100["capacity"]) == ("example.com/gpu", 8)
    (training,) = [t for t in report["tenants"] if t["name"] == "training"]
    (row,) = training["classes"]
    # the claims of 3 pods x 2 GPUs are pending, 2 are used as Kueue counts them, and the
    # queue's quota now is read under the mapped name
    assert (row["usage"], row["pending"], row["current"]["nominal"]) == (2, 6, 3)


def test_plan_without_kueues_configuration_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, err = plan(tmp_path, snapshot(tmp_path, kueue_config=False), capsys)
    assert report["classes"][0]["resource"] == "deviceclass/gpu.nvidia.com"
    assert (
        "warning: no ConfigMap kueue-system/kueue-manager-config in the snapshot: DRA classes "
        "are planned as declared" in err
    )
