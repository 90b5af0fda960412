"""`quotaguard review`: exit 0 allowed, 1 denied, 2 unusable input; output shapes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from quotaguard.cli import main

ROOT = Path(__file__).resolve().parents[1]
POLICY = str(ROOT / "config" / "policy.yaml")
FIXTURES = ROOT / "tests" / "fixtures" / "admission"

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: nb
  namespace: nb-alice
spec:
  containers:
    - name: main
      image: jupyter
      resources: {limits: {nvidia.com/gpu: 1}}
"""


def write(tmp_path, text, name="input.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_allowed_review_prints_the_response(tmp_path, capsys):
    assert main(["review", "--policy", POLICY, write(tmp_path, POD)]) == 0
    review = json.loads(capsys.readouterr().out)
    assert review["kind"] == "AdmissionReview"
    assert review["response"]["allowed"] is True
    assert review["response"]["patchType"] == "JSONPatch"


def test_patched_prints_the_mutated_object_as_yaml(tmp_path, capsys):
    assert main(["review", "-p", POLICY, "--patched", "-o", "yaml", write(tmp_path, POD)]) == 0
    obj = yaml.safe_load(capsys.readouterr().out)
    limits = obj["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu.shared": "1"}


def test_denied_exits_1_with_the_reason_on_stderr(tmp_path, capsys):
    path = write(tmp_path, POD.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2"))
    assert main(["review", "--policy", POLICY, path]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["response"]["status"]["code"] == 403
    assert err.count("\n") == 1
    assert err.startswith(f"{path}: Pod/nb: denied: ")
    assert "shared-units" not in err
    assert 'asks for nvidia.com/gpu: 2, which is shared class "shared"' in err
    assert "ask for nvidia.com/gpu: 1" in err


def test_admission_review_json_from_stdin(monkeypatch, capsys):
    body = (FIXTURES / "pod-create-inference.json").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(body))
    assert main(["review", "--policy", POLICY, "-"]) == 0
    answer = json.loads(capsys.readouterr().out)["response"]
    assert answer["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"


def test_namespace_flag_overrides_the_manifest(tmp_path, capsys):
    assert main(["review", "-p", POLICY, "-n", "training", "--patched", write(tmp_path, POD)]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "training"}


def test_several_documents_are_reviewed_one_by_one(tmp_path, capsys):
    denied = POD.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2").replace("name: nb", "name: b")
    assert main(["review", "-p", POLICY, write(tmp_path, POD + "---\n" + denied)]) == 1
    out, err = capsys.readouterr()
    answers = [r["response"]["allowed"] for r in json.loads(out)]
    assert answers == [True, False]
    assert "Pod/b: denied" in err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("spec: {containers: [", "neither JSON nor YAML"),
        (POD.replace("  namespace: nb-alice\n", ""), "has no metadata.namespace; pass --namespace"),
        ("", "no object to review"),
        ("- 1\n- 2\n", "is not an object"),
        ('{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
        (
            POD.replace("{limits: {nvidia.com/gpu: 1}}", "{limits: [1]}"),
            "Pod/nb: invalid object: request.object.spec.containers[0].resources.limits must be "
            "a map, not a list",
        ),
    ],
)
def test_unusable_input_exits_2_with_one_line(tmp_path, capsys, text, fragment):
    path = write(tmp_path, text)
    assert main(["review", "--policy", POLICY, path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(path)
    assert fragment in err


def test_unparsable_yaml_names_the_line(tmp_path, capsys):
    path = write(tmp_path, "metadata:\n  name: x\n  labels: [a\n")
    assert main(["review", "--policy", POLICY, path]) == 2
    assert capsys.readouterr().err.startswith(f"{path}:4:")


def test_missing_input_or_policy_exits_2(tmp_path, capsys):
    assert main(["review", "--policy", POLICY, str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["review", "--policy", str(tmp_path / "nope.yaml"), write(tmp_path, POD)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_invalid_policy_exits_1_with_file_line_column(tmp_path, capsys):
    broken = Path(POLICY).read_text().replace("maxGPUsPerPod: 8", "maxGPUsPerPodd: 8")
    policy = write(tmp_path, broken, "policy.yaml")
    assert main(["review", "--policy", policy, write(tmp_path, POD)]) == 1
    assert capsys.readouterr().err.startswith(f"{policy}:")


def test_every_kind_is_reviewed_offline_from_one_file_cluster_scoped_objects_skipped(
    tmp_path, capsys
):
    from quotaguard.kube.kinds import KINDS
    from tests.admission.builders import gpu, of_kind, template

    hint = {"quotaguard.dev/gpu-memory": "8Gi"}
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}}]
    for kind in KINDS:
        obj = of_kind(kind.id, template(gpu(1)), annotations=hint, namespace="inference")
        obj["metadata"]["name"] = kind.id.lower()
        objects.append(obj)
    objects.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "inference"},
            "spec": {},
        }
    )
    path = write(tmp_path, yaml.safe_dump_all(objects))
    assert main(["review", "-p", POLICY, "--patched", path]) == 0
    out, err = capsys.readouterr()
    stored = json.loads(out)
    assert [o["kind"] for o in stored] == [k.kind for k in KINDS]
    assert all("nvidia.com/mig-1g.10gb" in json.dumps(o) for o in stored)
    assert all('"nvidia.com/gpu"' not in json.dumps(o) for o in stored)
    assert err.splitlines() == [
        f"{path}: Namespace/inference: skipped: cluster-scoped, not a workload",
        f"{path}: ClusterQueue/inference: skipped: cluster-scoped, not a workload",
    ]


def test_a_workload_without_a_namespace_is_still_an_error(tmp_path, capsys):
    text = POD.replace("  namespace: nb-alice\n", "")
    assert main(["review", "-p", POLICY, write(tmp_path, text)]) == 2
    assert "has no metadata.namespace; pass --namespace" in capsys.readouterr().err


SHARED_TEMPLATES = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: vllm, namespace: serving-a}
spec:
  leaderWorkerTemplate:
    size: 2
    leaderTemplate:
      metadata: {annotations: {quotaguard.dev/gpu-memory: 8Gi}}
      spec:
        containers:
          - {name: leader, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
          - {name: sidecar, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
    workerTemplate:
      spec:
        containers:
          - {name: worker, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
          - {name: helper, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
"""


def _summary_lines(tmp_path, capsys, text):
    main(["review", "-p", POLICY, "-o", "summary", write(tmp_path, text)])
    return capsys.readouterr().out.splitlines()


def test_summary_gives_a_reason_shared_by_several_containers_once(tmp_path, capsys):
    two_containers = POD.replace("nb-alice", "serving-a") + (
        "    - name: helper\n      image: x\n      resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    lines = _summary_lines(tmp_path, capsys, two_containers)
    assert [line for line in lines if "rewrote:" in line] == [
        "  rewrote: main: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1",
        "  rewrote: helper: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1",
    ]
    assert [line for line in lines if "because:" in line] == ["  because: tenant inference, rule 2"]


def test_summary_names_the_containers_of_each_reason_when_they_differ(tmp_path, capsys):
    lines = _summary_lines(tmp_path, capsys, SHARED_TEMPLATES)
    assert sum("rewrote:" in line for line in lines) == 4
    assert [line for line in lines if "because:" in line] == [
        "  because: tenant inference, rule 1: best-fit for 8Gi (for leader/leader, leader/sidecar)",
        "  because: tenant inference, rule 2 (for worker/worker, worker/helper)",
    ]
