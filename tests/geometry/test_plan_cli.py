"""`quotaguard plan` with a geometry pool: layout changes listed, quotas on the capacity left."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from quotaguard.cli import main
from tests.policies import A100_PRODUCT, MIG_1G, MIG_2G, MIG_3G, PRODUCT_LABEL, policy_text


def geometry_policy(
    configs: tuple[str, ...] = ("all-balanced", "all-1g.10gb", "all-3g.40gb"), mode: str = "apply"
) -> str:
    """Small and large tenants on MIG slices of one A100 pool whose layouts may be `configs`."""
    return policy_text(
        [
            {"name": "small", "quota": {"mig-1g": {"guaranteed": 4}}},
            {"name": "large", "quota": {"mig-3g": {"guaranteed": 4}}},
        ],
        classes=(MIG_1G, MIG_2G, MIG_3G),
        name="p",
        geometry={
            "mode": mode,
            "pools": [
                {
                    "name": "a100",
                    "nodeSelector": {PRODUCT_LABEL: A100_PRODUCT},
                    "configs": list(configs),
                }
            ],
        },
    )


POLICY = geometry_policy()


def _node(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/mig.config": "all-balanced",
                "nvidia.com/mig.config.state": "success",
            },
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {
                "nvidia.com/mig-1g.10gb": "16",
                "nvidia.com/mig-2g.20gb": "8",
                "nvidia.com/mig-3g.40gb": "8",
            },
        },
    }


def _pending(index: int) -> dict[str, object]:
    gpu = {"nvidia.com/mig-1g.10gb": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{index}", "namespace": "small"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": gpu, "requests": gpu}}]},
        "status": {"phase": "Pending"},
    }


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    snapshot = tmp_path / "snapshot.json"
    items = [_node("gpu-a"), _node("gpu-b"), *(_pending(i) for i in range(60))]
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(policy), str(snapshot)


def test_json_lists_layout_changes_and_quotas_follow(files, capsys):
    policy, snapshot = files
    code = main(["plan", "--policy", policy, "--snapshot", snapshot, "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    nodes = {row["name"]: row for row in report["nodes"]}
    assert set(nodes) == {"gpu-a", "gpu-b"}
    assert {k: nodes["gpu-a"][k] for k in ("pool", "current", "target", "action")} == {
        "pool": "a100",
        "current": "all-balanced",
        "target": "all-1g.10gb",
        "action": "start",
    }
    assert "serves" in nodes["gpu-a"]["reason"]
    # The node being changed serves nothing meanwhile: only gpu-b counts.
    classes = {row["name"]: row["capacity"] for row in report["classes"]}
    assert classes == {"mig-1g": 16, "mig-2g": 8, "mig-3g": 8}


def test_table_shows_the_changes(files, capsys):
    policy, snapshot = files
    assert main(["plan", "--policy", policy, "--snapshot", snapshot]) == 0
    out = capsys.readouterr().out
    assert "LAYOUTS (geometry mode apply)" in out
    line = next(line for line in out.splitlines() if line.startswith("gpu-a"))
    assert line.split()[:5] == ["gpu-a", "a100", "all-balanced", "all-1g.10gb", "start"]


def test_no_geometry_no_nodes(capsys):
    sample = str(Path(__file__).parents[2] / "config" / "policy.yaml")
    fixture = str(Path(__file__).parents[1] / "fixtures" / "snapshots" / "cluster.json")
    main(["plan", "--policy", sample, "--snapshot", fixture, "--output", "json"])
    assert json.loads(capsys.readouterr().out)["nodes"] == []


def test_in_recommend_mode_the_node_still_counts(files, capsys):
    policy, snapshot = files
    Path(policy).write_text(geometry_policy(mode="recommend"))
    main(["plan", "--policy", policy, "--snapshot", snapshot, "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["nodes"][0]["action"] == "start"
    assert {row["name"]: row["capacity"] for row in report["classes"]}["mig-1g"] == 32


OPERATOR_CONFIG = textwrap.dedent(
    """\
    version: v1
    mig-configs:
      serving-small:
        - devices: all
          mig-enabled: true
          mig-devices: {1g.10gb: 7}
    """
)


def _with_operator_config(snapshot: str, namespace: str) -> None:
    document = json.loads(Path(snapshot).read_text())
    document["items"].append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "default-mig-parted-config", "namespace": namespace},
            "data": {"config.yaml": OPERATOR_CONFIG},
        }
    )
    Path(snapshot).write_text(json.dumps(document))


@pytest.mark.parametrize("namespace", ["gpu-operator", "nvidia-gpu-operator"])
def test_a_config_only_the_gpu_operator_defines_is_read_from_its_configmap(
    files, capsys, namespace
):
    policy, snapshot = files
    Path(policy).write_text(geometry_policy(("all-balanced", "serving-small")))
    args = ["plan", "--policy", policy, "--snapshot", snapshot, "--output", "json"]
    if namespace != "gpu-operator":
        args += ["--gpu-operator-namespace", namespace]
    main(args)
    without = capsys.readouterr()
    assert {row["target"] for row in json.loads(without.out)["nodes"]} <= {None, "all-balanced"}
    assert f"no ConfigMap {namespace}/default-mig-parted-config in the snapshot" in without.err

    _with_operator_config(snapshot, namespace)
    main(args)
    found = capsys.readouterr()
    # all-balanced is the catalogue's (the ConfigMap lacks it, and says so); serving-small is read
    assert "config 'all-balanced' is not in it" in found.err and "serving-small" not in found.err
    targets = {row["name"]: row["target"] for row in json.loads(found.out)["nodes"]}
    assert "serving-small" in targets.values()
