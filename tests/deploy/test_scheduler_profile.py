"""The GPU scheduler profile: generated from the policy, current, and the same in the kustomize
component and the chart; the second kube-scheduler runs restricted with the grants a scheduler
needs and its own Lease."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.manifests import NAMESPACE, Manifest, Renders, find, one, pod_spec
from tools import scheduler_profile

TOOLS = ["kustomize", "helm"]


def shipped_profile() -> Manifest:
    profile: Manifest = yaml.safe_load(scheduler_profile.PROFILE.read_text())
    return profile


def test_the_shipped_profile_is_the_one_the_sample_policy_gives() -> None:
    assert scheduler_profile.main(["--check"]) == 0, "run python -m tools.scheduler_profile"


def test_a_stale_profile_is_reported_and_rewritten(tmp_path: Path) -> None:
    out = tmp_path / "profile.yaml"
    out.write_text(scheduler_profile.PROFILE.read_text().replace("MostAllocated", "LeastAllocated"))
    assert scheduler_profile.main(["--check", "--out", str(out)]) == 1
    assert scheduler_profile.main(["--out", str(out)]) == 0
    assert out.read_text() == scheduler_profile.PROFILE.read_text()


def test_a_policy_that_does_not_load_is_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("apiVersion: quotaguard.dev/v1alpha1\nkind: TenantPolicy\nspec: {}\n")
    assert scheduler_profile.main(["--policy", str(bad), "--out", str(tmp_path / "p.yaml")]) == 2
    assert "policy.yaml" in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_the_profile_packs_on_every_gpu_resource_of_the_policy() -> None:
    (profile,) = shipped_profile()["profiles"]
    assert profile["schedulerName"] == "quotaguard-gpu"
    (fit,) = profile["pluginConfig"]
    strategy = fit["args"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    for resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"):
        assert weights[resource] > weights["cpu"], resource
    # BalancedAllocation spreads; it is off in this profile only
    assert profile["plugins"]["score"]["disabled"] == [{"name": "NodeResourcesBalancedAllocation"}]


def test_the_policys_scheduler_name_names_the_profile_and_its_lease(tmp_path: Path) -> None:
    policy = yaml.safe_load(scheduler_profile.POLICY.read_text())
    policy["spec"]["scheduling"] = {"schedulerName": "packer"}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    out = tmp_path / "profile.yaml"
    assert scheduler_profile.main(["--policy", str(path), "--out", str(out)]) == 0
    written = yaml.safe_load(out.read_text())
    assert written["profiles"][0]["schedulerName"] == "packer"
    assert written["leaderElection"]["resourceName"] == "packer-scheduler"


@pytest.mark.parametrize("tool", TOOLS)
def test_the_second_scheduler_runs_the_shipped_profile(renders: Renders, tool: str) -> None:
    docs = renders(tool, ["scheduler-profile"])
    deployment = one(docs, "Deployment", "quotaguard-gpu-scheduler")
    spec = pod_spec(deployment)
    (container,) = spec["containers"]
    assert container["image"].startswith("registry.k8s.io/kube-scheduler:")
    config_file = next(a.split("=", 1)[1] for a in container["command"] if a.startswith("--config"))
    (mount,) = container["volumeMounts"]
    assert config_file.startswith(mount["mountPath"] + "/")
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    config_map = one(docs, "ConfigMap", volume["configMap"]["name"])
    rendered = yaml.safe_load(config_map["data"][Path(config_file).name])
    assert rendered == shipped_profile()
    assert rendered["leaderElection"]["resourceNamespace"] == NAMESPACE
    security = {**spec["securityContext"], **container["securityContext"]}
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])


@pytest.mark.parametrize("tool", TOOLS)
def test_the_second_scheduler_has_a_schedulers_grants_and_its_own_lease(
    renders: Renders, tool: str
) -> None:
    docs = renders(tool, ["scheduler-profile"])
    bound = {
        b["roleRef"]["name"]
        for b in find(docs, "ClusterRoleBinding")
        if any(s["name"] == "quotaguard-gpu-scheduler" for s in b["subjects"])
    }
    assert bound == {"system:kube-scheduler", "system:volume-scheduler"}
    lease = one(docs, "Role", "quotaguard-gpu-scheduler-lease")
    named = [r for r in lease["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [shipped_profile()["leaderElection"]["resourceName"]],
            "verbs": ["get", "update"],
        }
    ]


@pytest.mark.parametrize("tool", TOOLS)
def test_the_default_build_has_no_second_scheduler(renders: Renders, tool: str) -> None:
    assert find(renders(tool, []), "Deployment", "quotaguard-gpu-scheduler") == []


def test_an_unwritable_output_is_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert scheduler_profile.main(["--out", str(blocked / "profile.yaml")]) == 2
    assert "cannot write" in capsys.readouterr().err
