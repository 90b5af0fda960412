"""`quotaguard plan` for a tenant whose rules list several GPU models (`to: [h100, a100]`):
one quota per model (flavor), pending work counted for the model its queue tries first, and
the order Kueue tries them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotaguard.cli import main
from tests.policies import A100_MODEL, H100_MODEL, policy_text

POLICY = policy_text(
    [
        {
            "name": "training",
            "quota": {"h100": {"guaranteed": 4, "max": 16}, "a100": {"guaranteed": 4, "max": 16}},
            "flavorFungibility": {"whenCanBorrow": "TryNextFlavor"},
            "rewrite": [{"to": ["h100", "a100"]}],
        },
        {"name": "other", "quota": {"a100": {"guaranteed": 4}}},
    ],
    classes=(A100_MODEL, H100_MODEL),
    name="p",
    cohort="gpus",
)


def node(name: str, product: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pending_workload(gpus: int) -> dict:
    """A Kueue Workload of a `to: [h100, a100]` Job: nvidia.com/gpu, no nodeSelector, no
    flavor yet."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "training"},
        "spec": {
            "queueName": "training",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "m", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
                            ]
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    snapshot = tmp_path / "cluster.json"
    items = [
        node("h1", "NVIDIA-H100-80GB-HBM3"),
        node("h2", "NVIDIA-H100-80GB-HBM3"),
        node("a1", "NVIDIA-A100-SXM4-80GB"),
        pending_workload(8),
    ]
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(policy), str(snapshot)


def test_each_model_has_its_own_quota_and_pending_work_counts_for_the_first(files, capsys):
    policy, snapshot = files
    assert main(["plan", "-p", policy, "--snapshot", snapshot, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    training = next(t for t in report["tenants"] if t["name"] == "training")
    assert training["flavorOrder"] == ["h100", "a100"]
    assert training["flavorFungibility"] == {
        "whenCanBorrow": "TryNextFlavor",
        "whenCanPreempt": "TryNextFlavor",
    }
    rows = {row["class"]: row for row in training["classes"]}
    assert {name: row["flavor"] for name, row in rows.items()} == {"a100": "a100", "h100": "h100"}
    # the 8 pending GPUs are h100 demand (the list's first), though a100 is first in the policy
    assert (rows["h100"]["pending"], rows["a100"]["pending"]) == (8, 0)
    assert rows["h100"]["nominal"] >= 8
    other = next(t for t in report["tenants"] if t["name"] == "other")
    assert other["flavorOrder"] == [] and other["flavorFungibility"] is None


def test_the_table_says_which_model_kueue_tries_first(files, capsys):
    policy, snapshot = files
    assert main(["plan", "-p", policy, "--snapshot", snapshot]) == 0
    out = capsys.readouterr().out
    assert (
        "training: Kueue tries h100 then a100, each on its own quota "
        "(whenCanBorrow TryNextFlavor, whenCanPreempt TryNextFlavor)"
    ) in out.splitlines()


def test_a_pending_pod_without_kueue_counts_for_the_first_class_of_its_list(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "training"},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": 4}}}]},
        "status": {"phase": "Pending"},
    }
    items = [node("h1", "NVIDIA-H100-80GB-HBM3"), node("a1", "NVIDIA-A100-SXM4-80GB"), pod]
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["plan", "-p", str(policy), "--snapshot", str(snapshot), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    training = next(t for t in report["tenants"] if t["name"] == "training")
    pending = {row["class"]: row["pending"] for row in training["classes"]}
    assert pending == {"a100": 0, "h100": 4}
