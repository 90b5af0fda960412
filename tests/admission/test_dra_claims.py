"""GPUs asked through DRA claims, governed at admission as GPUs asked as extended resources.

The manifests follow NVIDIA's DRA driver demo specs (a claim template per pod, a GPU shared by
the containers of a pod, MIG devices picked by profile) and Kueue's and Volcano's DRA samples
(a Job, a Volcano Job naming a ResourceClaimTemplate); the ResourceClaimTemplates, the shared
ResourceClaim and the DeviceClasses are in tests/fixtures/dra/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotaguard.admission import review_offline
from quotaguard.admission.claims import pod_claim_gpus
from quotaguard.admission.engine import decide
from quotaguard.admission.reviews import make_review
from quotaguard.kube.dra import DraObjects, dra_objects
from quotaguard.policy.model import TenantPolicy
from tests.admission.builders import applied, container, job, pod, template, volcano_job
from tests.policies import DRA_A100 as A100
from tests.policies import DRA_H100 as H100
from tests.policies import DRA_MIG_1G as MIG_1G
from tests.policies import DRA_MIG_3G as MIG_3G
from tests.policies import policy

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dra"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"

CLASSES = (H100, A100, MIG_1G, MIG_3G)


def mig_only(**spec: Any) -> TenantPolicy:
    """`research` may use MIG slices only, one GPU per pod; `training` anything."""
    return policy(
        [
            {"name": "research", "allowedClasses": ["mig-1g", "mig-3g"], "maxGPUsPerPod": 1},
            {"name": "training"},
        ],
        classes=CLASSES,
        **spec,
    )


def objects(*extra: dict[str, Any], namespace: str = "research") -> DraObjects:
    """The fixtures' DRA objects, their namespaced ones in `namespace`."""
    items = []
    for name in ("deviceclasses.yaml", "claims.yaml"):
        for item in yaml.safe_load_all((FIXTURES / name).read_text()):
            if "namespace" in item["metadata"]:
                item["metadata"]["namespace"] = namespace
            items.append(item)
    return dra_objects([*items, *extra])


def claims_pod(*claims: tuple[str, str, str], **spec: Any) -> dict[str, Any]:
    """A pod whose container uses each claim (name, `template` or `claim`, object name)."""
    main = container("main", resources={"claims": [{"name": c[0]} for c in claims]})
    refs = [
        {
            "name": name,
            "resourceClaimTemplateName" if how == "template" else "resourceClaimName": of,
        }
        for name, how, of in claims
    ]
    return pod(main, resourceClaims=refs, **spec)


def judged(
    obj: dict[str, Any],
    namespace: str = "research",
    *,
    rules: Any = None,
    lookup: DraObjects | None = None,
    policy_: TenantPolicy | None = None,
) -> tuple[Any, dict[str, Any]]:
    review, patched = review_offline(
        policy_ or mig_only(),
        make_review(obj, namespace=namespace),
        dra=objects(namespace=namespace) if lookup is None else lookup,
    )
    return review["response"], patched


def message(response: dict[str, Any]) -> str:
    assert response["allowed"] is False, response
    text: str = response["status"]["message"]
    return text


def test_a_mig_claim_of_an_allowed_class_is_queued_and_stamped() -> None:
    response, patched = judged(claims_pod(("mig", "template", "mig-1g")))
    assert response["allowed"] is True
    assert patched["metadata"]["labels"][KUEUE_LABEL] == "research"
    assert patched["metadata"]["annotations"]["quotaguard.dev/tenant"] == "research"


def test_exactly_a_whole_gpu_in_a_mig_only_tenant_is_refused_naming_the_claim() -> None:
    response, _ = judged(claims_pod(("gpu", "template", "single-gpu")))
    text = message(response)
    assert text.startswith(
        'tenant "research": claim "gpu" (ResourceClaimTemplate "single-gpu") request "gpu" may '
        'get devices of class "h100", "a100" (DeviceClass "gpu.nvidia.com"), which the tenant '
        "does not allow (allowedClasses: mig-1g, mig-3g); ask for "
        "DeviceClass \"mig.nvidia.com\" with a selector for gpu.nvidia.com/profile == '1g.10gb'"
    )


def test_a_selector_that_pins_an_allowed_model_is_allowed() -> None:
    research_h100 = policy([{"name": "research", "allowedClasses": ["h100"]}], classes=CLASSES)
    response, _ = judged(claims_pod(("gpus", "template", "two-h100")), policy_=research_h100)
    assert response["allowed"] is True
    # the same tenant asking for any whole GPU may get an A100
    response, _ = judged(claims_pod(("gpu", "template", "single-gpu")), policy_=research_h100)
    assert 'may get devices of class "a100"' in message(response)


def test_count_is_counted_against_max_gpus_per_pod() -> None:
    capped = policy([{"name": "research", "maxGPUsPerPod": 1}], classes=CLASSES)
    response, _ = judged(claims_pod(("gpus", "template", "two-h100")), policy_=capped)
    assert message(response) == (
        'tenant "research": at most 1 GPU-equivalent per pod (maxGPUsPerPod); pod asks for 2 '
        '(claim "gpus" = 2); ask for fewer devices or smaller classes in the claims, or use a '
        "namespace of a tenant that allows more"
    )


def test_two_mig_requests_of_one_claim_add_up() -> None:
    resolved = pod_claim_gpus(
        mig_only(), claims_pod(("mig", "template", "mig-pair"))["spec"], "research", objects()
    )
    assert resolved.worth == pytest.approx(4 / 7)
    assert resolved.per_class() == {"mig-1g": 1, "mig-3g": 1}
    response, _ = judged(claims_pod(("mig", "template", "mig-pair")))
    assert response["allowed"] is True


def test_first_available_is_refused_when_a_later_subrequest_is_forbidden() -> None:
    response, _ = judged(claims_pod(("gpu", "template", "mig-or-whole")))
    assert 'request "gpu/whole" may get devices of class "h100", "a100"' in message(response)
    assert 'request "gpu/mig"' not in message(response)


def test_first_available_is_worth_its_largest_subrequest() -> None:
    spec = claims_pod(("gpu", "template", "mig-or-whole"))["spec"]
    resolved = pod_claim_gpus(mig_only(), spec, "research", objects())
    assert resolved.worth == 1  # a whole GPU, should the MIG slice not be available


def test_allocation_mode_all_is_unresolved_without_a_bound() -> None:
    response, _ = judged(claims_pod(("all", "template", "every-gpu")), "training")
    assert message(response) == (
        'tenant "training": claim "all" (ResourceClaimTemplate "every-gpu"): request "gpus" '
        "takes every matching device of a node (allocationMode: All), a number known only on "
        "the node; ask for count: N instead"
    )


def test_allocation_mode_all_is_counted_with_max_devices_per_node() -> None:
    bounded = [
        {**c, "dra": {**c["dra"], "maxDevicesPerNode": 8}} if c["name"] in ("h100", "a100") else c
        for c in CLASSES
    ]
    capped = policy([{"name": "training", "maxGPUsPerPod": 8}], classes=bounded)
    response, _ = judged(claims_pod(("all", "template", "every-gpu")), "training", policy_=capped)
    assert response["allowed"] is True
    capped = policy([{"name": "training", "maxGPUsPerPod": 4}], classes=bounded)
    response, _ = judged(claims_pod(("all", "template", "every-gpu")), "training", policy_=capped)
    assert "pod asks for 8" in message(response)


def test_a_shared_resource_claim_by_name_is_judged_like_a_template() -> None:
    response, patched = judged(claims_pod(("mig", "claim", "shared-mig")))
    assert response["allowed"] is True and patched["metadata"]["labels"][KUEUE_LABEL]
    response, _ = judged(claims_pod(("mig", "claim", "not-there")))
    assert message(response) == (
        'tenant "research": claim "mig": ResourceClaim "not-there" is not found in namespace '
        '"research", so the GPUs it asks for cannot be judged; create the ResourceClaim first'
    )


def test_a_template_not_yet_created_is_a_denial_naming_it() -> None:
    response, _ = judged(claims_pod(("gpu", "template", "later")))
    assert message(response).startswith(
        'tenant "research": claim "gpu": ResourceClaimTemplate "later" is not found in '
        'namespace "research"'
    )
    assert response["auditAnnotations"]["denied"] == "claim-unresolved"


def test_an_unknown_device_class_is_unresolved() -> None:
    response, _ = judged(claims_pod(("gpu", "template", "gpu-from-nowhere")), "training")
    assert 'DeviceClass "gpu.example.com" does not exist' in message(response)


def test_without_device_classes_a_class_is_judged_by_its_name() -> None:
    lookup = DraObjects(templates=objects().templates)
    response, _ = judged(claims_pod(("gpu", "template", "gpu-from-nowhere")), lookup=lookup)
    assert response["allowed"] is True  # not a known GPU DeviceClass: not governed
    response, _ = judged(claims_pod(("gpu", "template", "single-gpu")), lookup=lookup)
    assert 'may get devices of class "h100"' in message(response)


def test_a_nic_claim_is_not_a_gpu_workload() -> None:
    response, patched = judged(claims_pod(("nic", "template", "rdma")))
    assert response["allowed"] is True
    assert "labels" not in patched["metadata"]  # not queued


def test_a_gpu_claim_in_a_namespace_no_tenant_owns_is_refused_when_policy_says_deny() -> None:
    strict = mig_only(unmatchedNamespaces="deny")
    response, _ = judged(claims_pod(("mig", "template", "mig-1g")), "elsewhere", policy_=strict)
    assert message(response).startswith('namespace "elsewhere" belongs to no tenant')
    response, _ = judged(claims_pod(("mig", "template", "mig-1g")), "elsewhere")
    assert response["allowed"] is True


def test_a_gpu_device_class_no_class_covers_is_refused() -> None:
    only_mig = policy([{"name": "research"}], classes=(MIG_1G,))
    response, _ = judged(claims_pod(("gpu", "template", "single-gpu")), policy_=only_mig)
    assert message(response).startswith(
        'tenant "research": claim "gpu" (ResourceClaimTemplate "single-gpu") request "gpu" asks '
        'for devices of DeviceClass "gpu.nvidia.com", which no GPU class of policy "example" '
        "covers"
    )


def test_a_kueue_job_with_a_claim_template_is_queued_and_its_foreign_queue_refused() -> None:
    pod_template = template(
        container("main", resources={"claims": [{"name": "gpu"}]}),
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "mig-1g"}],
        restartPolicy="Never",
    )
    response, patched = judged(job(pod_template))
    assert response["allowed"] is True
    assert patched["metadata"]["labels"][KUEUE_LABEL] == "research"
    template_annotations = patched["spec"]["template"]["metadata"]["annotations"]
    assert template_annotations["quotaguard.dev/tenant"] == "research"
    response, _ = judged(job(pod_template, labels={KUEUE_LABEL: "training"}))
    assert 'queue "training" (label kueue.x-k8s.io/queue-name) belongs to tenant "training"' in (
        message(response)
    )


def test_a_volcano_job_with_a_claim_template_gets_the_tenant_queue() -> None:
    pod_template = template(
        container("main", resources={"claims": [{"name": "gpu"}]}),
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
    )
    volcano = mig_only(backend="volcano")
    response, _ = judged(volcano_job(("worker", pod_template)), policy_=volcano)
    assert 'worker claim "gpu" (ResourceClaimTemplate "single-gpu")' in message(response)
    response, patched = judged(volcano_job(("worker", pod_template)), "training", policy_=volcano)
    assert response["allowed"] is True
    assert patched["spec"]["queue"] == "training"
    assert patched["spec"]["schedulerName"] == "volcano"


def test_claims_of_a_pod_are_counted_with_its_extended_gpus() -> None:
    extended = {
        "name": "mig-1g-dp",
        "resource": "nvidia.com/mig-1g.10gb",
        "memory": "10Gi",
        "slices": 1,
    }
    mixed = policy([{"name": "research", "maxGPUsPerPod": 0.2}], classes=(*CLASSES, extended))
    obj = claims_pod(("mig", "template", "mig-1g"))
    obj["spec"]["containers"].append(
        container("side", resources={"limits": {extended["resource"]: 1}})
    )
    response, _ = judged(obj, policy_=mixed)
    assert "pod asks for 0.29" in message(response)
    assert 'claim "mig" = 0.14, extended resources = 0.14' in message(response)


def test_a_resource_claim_template_asking_a_forbidden_class_is_refused_at_creation() -> None:
    (single,) = [
        item
        for item in yaml.safe_load_all((FIXTURES / "claims.yaml").read_text())
        if item["metadata"]["name"] == "single-gpu"
    ]
    decision = decide(
        mig_only(),
        make_review(single, namespace="research")["request"],
        operation_path="validate",
        dra=objects(),
    )
    assert decision.rules == ("class-not-allowed",)
    assert decision.message.startswith(
        'tenant "research": ResourceClaimTemplate "single-gpu" request "gpu" may get devices of '
        'class "h100", "a100"'
    )
    training = decide(
        mig_only(),
        make_review(single, namespace="training")["request"],
        operation_path="validate",
        dra=objects(),
    )
    assert training.allowed


def test_a_resource_claim_worth_more_than_a_pod_may_have_is_refused() -> None:
    capped = policy([{"name": "research", "maxGPUsPerPod": 1}], classes=CLASSES)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "big", "namespace": "research"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}
                ]
            }
        },
    }
    decision = decide(
        capped,
        make_review(claim, namespace="research")["request"],
        operation_path="validate",
        dra=objects(),
    )
    assert decision.rules == ("max-gpus-per-pod",)
    assert 'ResourceClaim "big" asks for 4 GPU-equivalents' in decision.message


def test_a_decision_patch_applies() -> None:
    obj = claims_pod(("mig", "template", "mig-1g"))
    decision = decide(
        mig_only(),
        make_review(obj, namespace="research")["request"],
        operation_path="mutate",
        dra=objects(),
    )
    assert applied(obj, decision)["metadata"]["labels"][KUEUE_LABEL] == "research"


def test_the_webhooks_sparse_decoding_keeps_the_claims() -> None:
    """The server decodes only the fields admission reads: the claims are among them."""
    from quotaguard.admission.engine import review
    from quotaguard.admission.sparse import decode_review_body

    for obj in (
        claims_pod(("gpu", "template", "single-gpu")),
        job(
            template(
                container("main", resources={"claims": [{"name": "gpu"}]}),
                resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
            )
        ),
    ):
        body = json.dumps(make_review(obj, namespace="research")).encode()
        answer = review(
            mig_only(), decode_review_body(body), operation_path="validate", dra=objects()
        )
        assert answer["response"]["allowed"] is False, obj["kind"]
