"""Simulate says which GPUs were DRA: a trace workload with claims (resolved against the trace's
`draObjects`) or `dra: true` is admitted, queued and placed as its device-plugin twin, and the
report gives its GPU-hours per tenant and class apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotaguard.cli import main
from quotaguard.simulate.simulation import simulate
from quotaguard.simulate.trace import TraceInvalid, load_trace_text
from tests.policies import policy, policy_text

# one class on both: nvidia.com/gpu from the device plugin, gpu.nvidia.com devices from DRA
H100 = {
    "name": "h100",
    "resource": "nvidia.com/gpu",
    "memory": "80Gi",
    "dra": {"deviceClassName": "gpu.nvidia.com"},
}
TENANTS = [
    {"name": "research", "quota": {"h100": {"guaranteed": 4}}},
    {"name": "training", "quota": {"h100": {"guaranteed": 4}}},
]
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-gpus", "namespace": "research"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
                ]
            }
        }
    },
}
CLAIM_POD = {
    "spec": {
        "containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}],
    }
}
PLUGIN_POD = {
    "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
}


def trace_of(**extra: Any) -> dict[str, Any]:
    return {
        "horizon": "4h",
        "nodes": [{"name": "gpu-1", "allocatable": {"nvidia.com/gpu": "8"}}],
        "draObjects": [TEMPLATE],
        "workloads": [
            {"at": 0, "duration": "1h", "namespace": "research", "pod": CLAIM_POD},
            {"at": 0, "duration": "1h", "namespace": "research", "pod": PLUGIN_POD},
            {"at": 0, "duration": "2h", "namespace": "training", "pod": PLUGIN_POD, "dra": True},
            {"at": 0, "duration": "2h", "namespace": "training", "pod": PLUGIN_POD},
        ],
        **extra,
    }


def simulated(document: dict[str, Any]) -> Any:
    chosen = policy(TENANTS, classes=[H100])
    trace = load_trace_text(yaml.safe_dump(document), "trace.yaml")
    return simulate(chosen, trace, arms=("static", "dynamic"))


def test_a_claim_is_placed_as_its_device_plugin_twin_and_counted_as_dra() -> None:
    simulation = simulated(trace_of())
    claim, plugin, marked, unmarked = simulation.setup.arrivals
    assert claim.verdict.allowed and claim.verdict.request == plugin.verdict.request
    assert (claim.dra, plugin.dra, marked.dra, unmarked.dra) == (True, False, True, False)
    dra = simulation.dra()
    assert dra["arm"] == "dynamic"
    rows = {(r["tenant"], r["class"]): (r["draGPUHours"], r["gpuHours"]) for r in dra["classes"]}
    # research: 2 GPUs for 1h by claim, 2 for 1h by the device plugin
    # training: 2 GPUs for 2h marked dra, 2 for 2h not
    assert rows == {("research", "h100"): (2.0, 4.0), ("training", "h100"): (4.0, 8.0)}
    assert (dra["draGPUHours"], dra["gpuHours"], dra["workloads"]) == (6.0, 12.0, 2)


def test_without_the_claims_template_the_claim_is_refused_as_the_webhook_would() -> None:
    simulation = simulated(trace_of(draObjects=[]))
    claim = simulation.setup.arrivals[0]
    assert not claim.verdict.allowed
    assert 'ResourceClaimTemplate "two-gpus" is not found' in claim.verdict.message


def test_a_trace_without_dra_has_no_dra_figures() -> None:
    document = trace_of()
    document["workloads"] = [w for w in document["workloads"] if "dra" not in w][1:]
    assert simulated(document).dra() is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"draObjects": {"kind": "ResourceClaimTemplate"}}, "draObjects: must be a list"),
        ({"draObjects": [{"apiVersion": "v1", "kind": "Pod"}]}, "draObjects[0]: 'Pod' is not"),
        (
            {"draObjects": [{**TEMPLATE, "metadata": {}}]},
            "draObjects[0].metadata: needs metadata.name",
        ),
    ],
)
def test_bad_dra_parts_of_a_trace_are_located(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(TraceInvalid) as caught:
        load_trace_text(yaml.safe_dump(trace_of(**change)), "trace.yaml")
    assert any(expected in line for line in caught.value.problems), caught.value.problems
    assert all(line.startswith("trace.yaml:") for line in caught.value.problems)


def test_a_dra_flag_that_is_not_true_or_false_is_located() -> None:
    document = trace_of()
    document["workloads"][2]["dra"] = "yes"
    with pytest.raises(TraceInvalid) as caught:
        load_trace_text(yaml.safe_dump(document), "trace.yaml")
    assert any("workloads[2].dra: must be true or false" in p for p in caught.value.problems)


def test_the_report_and_json_say_which_gpu_hours_were_dra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "policy.yaml").write_text(policy_text(TENANTS, classes=[H100]))
    (tmp_path / "trace.yaml").write_text(yaml.safe_dump(trace_of()))
    policy_file, trace_file = str(tmp_path / "policy.yaml"), str(tmp_path / "trace.yaml")
    args = ["simulate", "-p", policy_file, "--trace", trace_file, "--no-progress"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "GPU-hours through DRA (arm dynamic): 6 of 12 (50%):" in text
    assert "  research h100: 2 of 4 (50%)" in text
    assert main([*args, "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["dra"]["draGPUHours"] == 6.0


def test_a_class_only_dra_reaches_is_offered_by_nodes_under_its_implicit_resource() -> None:
    dra_only = {"name": "h100", "memory": "80Gi", "dra": {"deviceClassName": "gpu.nvidia.com"}}
    chosen = policy(TENANTS, classes=[dra_only])
    document = trace_of()
    document["nodes"] = [
        {"name": "gpu-1", "allocatable": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "8"}}
    ]
    document["workloads"] = document["workloads"][:1]
    trace = load_trace_text(yaml.safe_dump(document), "trace.yaml")
    simulation = simulate(chosen, trace, arms=("static", "dynamic"))
    assert simulation.setup.capacity["h100"].capacity == 8
    (claim,) = simulation.setup.arrivals
    assert simulation.runs["dynamic"].admitted_at[claim.id] == 0
    assert simulation.dra()["draGPUHours"] == 2.0
