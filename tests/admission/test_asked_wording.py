"""Denials in the user's words: what the manifest asked for, one tenant prefix, no repeats; and a
`best-fit` rule that a pod without a memory hint passes on to the next rule."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from quotaguard.admission import mutate, review_offline, validate
from quotaguard.admission.decision import Denial, deny
from quotaguard.admission.names import REWRITTEN_ANNOTATION
from quotaguard.cli import main
from quotaguard.policy.loader import load_policy_text

from .builders import applied, gpu, job, owner, pod, template
from .conftest import SAMPLE_POLICY

MIG_3G = "nvidia.com/mig-3g.40gb"
SHARED = "nvidia.com/gpu.shared"


def offline(policy, obj, namespace):
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": obj["kind"]},
            "operation": "CREATE",
            "namespace": namespace,
            "object": obj,
        },
    }
    response, stored = review_offline(policy, body)
    return response["response"], stored


def test_a_rewritten_request_is_quoted_as_the_manifest_wrote_it(policy):
    response, _ = offline(policy, pod(gpu(8)), "inference")
    assert not response["allowed"]
    assert response["status"]["message"] == (
        'tenant "inference": at most 1 GPU-equivalent per pod (maxGPUsPerPod); pod asks for '
        "3.43 (main: nvidia.com/gpu: 8 as nvidia.com/mig-3g.40gb = 3.43); request fewer GPUs "
        "or smaller classes, or use a namespace of a tenant that allows more"
    )


def test_a_pod_made_from_a_rewritten_template_is_quoted_the_same_way(policy):
    # The Job's template was rewritten at the Job; its pod carries the template's record.
    decision = mutate(policy, job(template(gpu(8))), "inference")
    stored = applied(job(template(gpu(8))), decision)
    child = pod(gpu(8, resource=MIG_3G), owners=[owner()])
    child["metadata"]["annotations"] = stored["spec"]["template"]["metadata"]["annotations"]
    verdict = validate(policy, child, "inference")
    assert "(main: nvidia.com/gpu: 8 as nvidia.com/mig-3g.40gb = 3.43)" in verdict.message


def test_a_record_that_does_not_match_the_container_is_not_believed(policy):
    stale = {REWRITTEN_ANNOTATION: "main: nvidia.com/gpu=2 -> nvidia.com/mig-3g.40gb=2"}
    verdict = validate(policy, pod(gpu(3, resource=MIG_3G), annotations=stale), "inference")
    assert "(main: nvidia.com/mig-3g.40gb: 3 = 1.29)" in verdict.message
    assert "nvidia.com/gpu: " not in verdict.message


def test_a_shared_class_denial_names_what_to_write_in_the_manifest(policy):
    response, _ = offline(policy, pod(gpu(3)), "notebooks")
    assert response["status"]["message"] == (
        'tenant "notebooks": container "main" asks for nvidia.com/gpu: 3, which is shared class '
        '"shared" (nvidia.com/gpu.shared); time-slicing gives one container no extra compute '
        "for more units: ask for nvidia.com/gpu: 1"
    )


def test_several_denials_share_one_tenant_prefix(policy):
    obj = pod(gpu(2, name="a"), gpu(3, resource=SHARED, name="b"))
    verdict = validate(policy, obj, "nb-a")
    assert verdict.rules == ("class-not-allowed", "shared-units", "max-gpus-per-pod")
    assert verdict.message.startswith('tenant "notebooks": (1) container "a" asks for class')
    assert verdict.message.count('tenant "notebooks"') == 1
    assert "(3) at most 1 GPU-equivalent per pod" in verdict.message
    assert "(a: nvidia.com/gpu: 2, b: nvidia.com/gpu.shared: 3 = 0.75)" in verdict.message


def test_the_same_denial_twice_is_given_once():
    denial = Denial("queue-isolation", 'queue "q" belongs to tenant "b"')
    decision = deny([denial, denial])
    assert decision.message == 'queue "q" belongs to tenant "b"'
    assert decision.denials == (denial,)


def test_denials_without_a_shared_prefix_keep_each_their_own():
    decision = deny([Denial("unmatched-namespace", "namespace x"), Denial("gpu-value", "y")])
    assert decision.message == "(1) namespace x (2) y"


# --- best-fit without a memory hint ----------------------------------------------------------


def test_best_fit_without_a_hint_passes_the_pod_on_to_the_next_rule(policy):
    response, stored = offline(policy, pod(gpu(1)), "inference")
    assert response["allowed"], response
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {MIG_3G: "1"}
    assert response["warnings"] == [
        "main: nvidia.com/gpu=1 -> nvidia.com/mig-3g.40gb=1 (tenant inference, rule 2)"
    ]


POLICY_WITHOUT_FALLBACK = textwrap.dedent(
    """\
    apiVersion: quotaguard.dev/v1alpha1
    kind: TenantPolicy
    metadata: {name: p}
    spec:
      gpuClasses:
        - {name: h100, resource: nvidia.com/gpu, memory: 80Gi, slices: 7}
        - {name: mig1, resource: nvidia.com/mig-1g.10gb, memory: 10Gi, slices: 1}
      tenants:
        - name: inference
          namespaces: [inference]
          allowedClasses: [mig1]
          rewrite:
            - when: {gpus: 1}
              to: best-fit
            - when: {memoryAtMost: 10Gi}
              to: mig1
    """
)


def test_with_no_rule_after_it_the_whole_gpu_is_kept_and_said_so():
    policy = load_policy_text(POLICY_WITHOUT_FALLBACK, "p.yaml")
    response, _ = offline(policy, pod(gpu(1)), "inference")
    assert not response["allowed"]
    assert response["warnings"] == [
        "main: best-fit needs quotaguard.dev/gpu-memory and no later rule matched; kept "
        "nvidia.com/gpu"
    ]
    assert 'asks for class "h100" (nvidia.com/gpu)' in response["status"]["message"]


def test_validate_warns_where_no_rule_is_left_after_best_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "p.yaml"
    path.write_text(POLICY_WITHOUT_FALLBACK)
    assert main(["validate", str(path)]) == 0
    assert main(["validate", "--strict", str(path)]) == 1
    err = capsys.readouterr().err
    assert (
        f"{path}:14:15: warning: spec.tenants[0].rewrite[0].to: a pod without "
        "quotaguard.dev/gpu-memory passes best-fit on to the next rule, and no rule after this "
        "one takes it: its nvidia.com/gpu stays a whole GPU, which tenant 'inference' does not "
        "allow: such pods are denied (add a rule without a memory condition after it)"
    ) in err


LAST_RULE = "        - when: {memoryAtMost: 10Gi}\n          to: mig1\n"


@pytest.mark.parametrize(
    "later",
    ["        - to: mig1\n", "        - when: {gpus: 2}\n          to: mig1\n"],
    ids=["catch-all", "no memory condition"],
)
def test_no_warning_when_a_later_rule_can_take_it(tmp_path, capsys, later):
    assert LAST_RULE in POLICY_WITHOUT_FALLBACK
    path = tmp_path / "p.yaml"
    path.write_text(POLICY_WITHOUT_FALLBACK.replace(LAST_RULE, LAST_RULE + later))
    assert main(["validate", "--strict", str(path)]) == 0, capsys.readouterr().err


def test_the_sample_policy_has_no_such_warning():
    assert main(["validate", "--strict", str(SAMPLE_POLICY)]) == 0
