"""The webhook registrations (webhook/*.yaml, the pilot component) built from the kind table.

One webhook per kind and per operation, so that each matchCondition reads that kind's
pod-template paths (`quotaguard.kube.kinds`). `python webhook/generate.py` writes the files;
tests/deploy checks that the committed files are what this module builds.

The CEL of a matchCondition checks types before it descends, so an odd object gets a clear
answer rather than an evaluation error (which failurePolicy Fail would turn into a rejection):
"not sent" for the conditions that look for GPU requests, "sent" for the one that looks for a
decision already made (`decided_pod_expression`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import yaml

from quotaguard.admission.names import DECIDED_ANNOTATION, DEFAULT_SCHEDULER, TENANT_ANNOTATION
from quotaguard.admission.owners import KUBE_CONTROLLERS
from quotaguard.kube.dra import RESOURCE_GROUP as DRA_GROUP
from quotaguard.kube.kinds import BY_ID, KINDS, OWNER_KINDS, Kind, Step, parse_path
from quotaguard.kube.names import (
    ACCELERATOR_PATTERN,
    KAI_SHARE_ANNOTATIONS,
    KUEUE_ADMISSION_GATE,
    KUEUE_QUEUE_LABEL,
)
from quotaguard.policy.sent_names import NAME_CHECK_HEAD
from quotaguard.webhook.name_widening import (
    ANOTHER_NVIDIA_RESOURCE,
    checked_names,
    widened_configuration,
)
from quotaguard.webhook.registration_headers import (
    GENERATED,
    MUTATING_HEADER,
    PILOT_HEADER,
    VALIDATING_HEADER,
    VALIDATING_RESOURCES_HEADER,
    generated_for,
)
from quotaguard.webhook.update_conditions import (
    resources_changed_expression,
)

Operation = Literal["CREATE", "UPDATE"]
Manifest = dict[str, Any]

SERVICE = {"name": "quotaguard-webhook", "namespace": "quotaguard-system", "port": 443}
EXEMPT_NAMESPACES = ["kube-system", "quotaguard-system"]
IGNORE_LABEL = "quotaguard.dev/ignore"
PILOT_LABEL = "quotaguard.dev/pilot"
# The API server calls mutating configurations in name order. This one must come before
# Kueue's (kueue-mutating-webhook-configuration), whose webhooks gate a Pod or suspend a Job at
# creation only when the queue label quotaguard adds is already there; see docs/deploy.md.
MUTATING = "00-quotaguard-mutating"
VALIDATING = "quotaguard-validating"
# The fail-closed validation of updates that change container resources has a configuration of
# its own: `kubectl apply` keeps the whole object in an annotation of at most 262,144 bytes, and
# one configuration holding every validating webhook is larger.
VALIDATING_RESOURCES = "quotaguard-validating-resources"
VALIDATING_NAMES = (VALIDATING, VALIDATING_RESOURCES)
REQUESTS_NVIDIA = "requests-gpus"  # a GPU resource, or DRA claims
CLAIM_ASKS_FOR_DEVICES = "asks-for-devices-not-for-a-pod"
# Who makes the ResourceClaims of a pod from its template, and of an extended resource backed
# by DRA: those claims were judged with the template or the pod.
CLAIM_MAKERS = (
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:resource-claim-controller",
    "system:kube-scheduler",
)
# (plural, the path of the claim spec's `devices` below `object`)
CLAIM_RESOURCES = (
    ("resourceclaimtemplates", ("spec", "spec", "devices")),
    ("resourceclaims", ("spec", "devices")),
)
PLAIN_GPU_NEXT_TO_ANOTHER = "plain-gpu-next-to-another-nvidia-resource"
HAS_COMPONENTS = "has-components"
NOT_YET_DECIDED = "not-yet-decided-by-quotaguard"
RESOURCES_CHANGED = "container-resources-changed"
RESOURCES_UNCHANGED = "container-resources-unchanged"

# A resource admission judges (`podspec.is_gpu_resource`, `ungoverned_gpu_resource`): any
# nvidia.com/ resource (HAMi's too), any a DRA DeviceClass serves implicitly
# (deviceclass.resource.kubernetes.io/mig.nvidia.com), and any whose name looks like an
# accelerator.
_GPU_NAME = f"{NAME_CHECK_HEAD} || name.contains('/') && name.matches('{ACCELERATOR_PATTERN}')"
_ANY_NVIDIA = f"c.resources[section].exists(name, {_GPU_NAME})"
_PLAIN_NEXT_TO_ANOTHER = (
    "'nvidia.com/gpu' in c.resources[section]\n"
    f"&& c.resources[section].exists(name, {ANOTHER_NVIDIA_RESOURCE})"
)


def webhook_name(kind: Kind, path: str, operation: Operation, *, resources: bool = False) -> str:
    """`pods.mutate.quotaguard.dev`, `rayjobs-update.validate.quotaguard.dev`, and for the
    updates that change container resources `rayjobs-resources.validate.quotaguard.dev`."""
    suffix = "-resources" if resources else "-update" if operation == "UPDATE" else ""
    return f"{kind.id.lower()}s{suffix}.{path}.quotaguard.dev"


def _containers(
    spec: str, resources_check: str, lists: tuple[str, ...] = ("initContainers", "containers")
) -> str:
    """Some container of the pod spec `spec` names a resource `resources_check` accepts."""
    return (
        f"[{', '.join(repr(field) for field in lists)}].exists(field, field in {spec}"
        f" && type({spec}[field]) == list\n"
        f"  && {spec}[field].exists(c, type(c) == map && 'resources' in c"
        " && type(c.resources) == map\n"
        "    && ['limits', 'requests'].exists(section, section in c.resources\n"
        "      && type(c.resources[section]) == map\n"
        f"      && {resources_check})))"
    )


# A pod template's annotations ask KAI scheduler for a share of a GPU (gpu-fraction, ...).
_SHARE_ANNOTATIONS = (
    "type({value}) == map\n"
    f"&& [{', '.join(repr(a) for a in KAI_SHARE_ANNOTATIONS)}].exists(a, a in {{value}})"
)


def _requirements(value: str) -> str:
    """The ResourceRequirements map `value` names a GPU resource."""
    return (
        f"['limits', 'requests'].exists(section, section in {value}"
        f" && type({value}[section]) == map\n"
        f"  && {value}[section].exists(name, {_GPU_NAME}))"
    )


def _along(value: str, steps: tuple[Step, ...], leaf: str, depth: int = 0) -> str:
    """CEL that holds when some value at `steps` below `value` (known to be a map) passes
    `leaf`, a template given that value's CEL as `{value}`."""
    if not steps:
        return leaf.replace("{value}", value)
    step, rest = steps[0], steps[1:]
    here = f"{value}.{step.field}"
    if step.kind == "field":
        if not rest:
            return f"has({here})\n&& {leaf.replace('{value}', here)}"
        return f"has({here}) && type({here}) == map\n&& {_along(here, rest, leaf, depth)}"
    item = f"i{depth}"
    if step.kind == "list":
        inner = _along(item, rest, leaf, depth + 1)
        return (
            f"has({here}) && type({here}) == list\n"
            f"&& {here}.exists({item}, type({item}) == map\n&& {inner})"
        )
    entry = f"{here}[{item}]"
    inner = _along(entry, rest, leaf, depth + 1)
    return (
        f"has({here}) && type({here}) == map\n"
        f"&& {here}.exists({item}, type({entry}) == map\n&& {inner})"
    )


def _claims(spec: str) -> str:
    """The pod spec `spec` (known to be a map) names DRA claims (what they ask for is in
    objects CEL cannot read: every pod with claims is sent)."""
    claims = f"{spec}.resourceClaims"
    return f"has({claims}) && type({claims}) == list && size({claims}) > 0"


def match_expression(
    kind: Kind, resources_check: str = _ANY_NVIDIA, *, claims: bool = False
) -> str:
    """Some pod template of an object of `kind` names a resource `resources_check` accepts,
    or with `claims` DRA claims (an AppWrapper: has components, whose templates CEL cannot
    search)."""
    if kind.components is not None:
        return _along("object", parse_path(kind.components), "type({value}) == list")
    branches = []
    for place in kind.templates:
        if place.form == "spark-role":
            branches.extend(_spark_role(place.steps, resources_check))
            continue
        if place.form == "resources":
            leaf = "type({value}) == map\n&& " + _requirements("{value}")
            branches.append(_along("object", place.steps, leaf))
            continue
        if claims:
            leaf = (
                "type({value}) == map\n&& (\n"
                + _indent(_containers("{value}", resources_check))
                + "\n  || "
                + _claims("{value}")
                + ")"
            )
        else:
            leaf = "type({value}) == map\n&& " + _containers("{value}", resources_check)
        branches.append(_along("object", (*place.steps, Step("field", "spec")), leaf))
        if resources_check == _ANY_NVIDIA:
            annotations = (*place.steps, Step("field", "metadata"), Step("field", "annotations"))
            branches.append(_along("object", annotations, _SHARE_ANNOTATIONS))
    if kind.runtime_ref is not None and resources_check == _ANY_NVIDIA:
        branches.append(_along("object", parse_path(kind.runtime_ref), "type({value}) == map"))
    if len(branches) == 1:
        return branches[0]
    return "\n|| ".join(f"({branch})" for branch in branches)


def _spark_role(steps: tuple[Step, ...], resources_check: str) -> list[str]:
    """A SparkApplication's driver or executor asks for a GPU: in its template, its sidecars or
    init containers, or its `gpu` ({name, quantity})."""
    template = (*steps, Step("field", "template"))
    in_template = "type({value}) == map\n&& " + _containers("{value}", resources_check)
    own = "type({value}) == map\n&& " + _containers(
        "{value}", resources_check, ("initContainers", "sidecars")
    )
    gpu = (
        "type({value}) == map && 'name' in {value}\n"
        f"&& [{{value}}['name']].exists(name, type(name) == string && ({_GPU_NAME}))"
    )
    branches = [
        _along("object", (*template, Step("field", "spec")), in_template),
        _along("object", steps, own),
        _along("object", (*steps, Step("field", "gpu")), gpu),
    ]
    if resources_check == _ANY_NVIDIA:
        metadata = (*template, Step("field", "metadata"), Step("field", "annotations"))
        branches.append(_along("object", metadata, _SHARE_ANNOTATIONS))
        branches.append(
            _along("object", (*steps, Step("field", "annotations")), _SHARE_ANNOTATIONS)
        )
    return branches


def _non_empty_string(map_cel: str, key: str) -> str:
    """The map `map_cel` (known to be a map) holds a non-empty string at `key`."""
    entry = f"{map_cel}['{key}']"
    return f"'{key}' in {map_cel}\n&& type({entry}) == string && {entry} != ''"


def _metadata_map(field: str) -> str:
    """`object.metadata.<field>` is a map (`object.metadata` known to be one)."""
    here = f"object.metadata.{field}"
    return f"has({here}) && type({here}) == map"


def _quoted_lines(names: list[str]) -> str:
    return ",\n".join(f"'{name}'" for name in names)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _stamped() -> str:
    """The Pod carries the tenant stamp and the decision record quotaguard's mutation writes
    (whether the record names what the Pod asks for, CEL cannot tell: validation checks it)."""
    return (
        "has(object.metadata) && type(object.metadata) == map\n"
        f"&& {_metadata_map('annotations')}\n"
        f"&& {_non_empty_string('object.metadata.annotations', TENANT_ANNOTATION)}\n"
        f"&& {_non_empty_string('object.metadata.annotations', DECIDED_ANNOTATION)}"
    )


def _made_by_a_kube_controller() -> str:
    """`quotaguard.admission.workload.owned_by_workload` for kube-controller-manager's
    controllers: the request comes from one of them and the Pod names an owner of a handled
    kind. (The operators a policy trusts are not known here: their pods are still sent.)"""
    usernames = _quoted_lines(sorted(KUBE_CONTROLLERS))
    owners = _quoted_lines(sorted(f"{group}/{kind}" for group, kind in OWNER_KINDS))
    references = "object.metadata.ownerReferences"
    group = (
        "(o.apiVersion.contains('/')"
        " ? o.apiVersion.substring(0, o.apiVersion.lastIndexOf('/')) : '')"
    )
    owner_check = (
        "type(o) == map\n"
        "&& 'apiVersion' in o && type(o.apiVersion) == string\n"
        "&& 'kind' in o && type(o.kind) == string\n"
        f"&& {group} + '/' + o.kind in [\n{_indent(owners)}]"
    )
    return (
        "has(request.userInfo) && has(request.userInfo.username)\n"
        f"&& request.userInfo.username in [\n{_indent(usernames)}]\n"
        f"&& has({references}) && type({references}) == list\n"
        f"&& {references}.exists(o,\n{_indent(owner_check)})"
    )


def _queued_and_gated_by_kueue() -> str:
    """What quotaguard's mutation and then Kueue's pod webhook leave on a bare Pod: the queue
    label, Kueue's admission gate, and no scheduler but the default one."""
    gates = "object.spec.schedulingGates"
    scheduler = "object.spec.schedulerName"
    return (
        f"{_metadata_map('labels')}\n"
        f"&& {_non_empty_string('object.metadata.labels', KUEUE_QUEUE_LABEL)}\n"
        "&& has(object.spec) && type(object.spec) == map\n"
        f"&& has({gates}) && type({gates}) == list\n"
        f"&& {gates}.exists(g, type(g) == map && 'name' in g && type(g.name) == string\n"
        f"  && g.name == '{KUEUE_ADMISSION_GATE}')\n"
        f"&& (!has({scheduler})\n"
        f"  || type({scheduler}) == string && {scheduler} in ['', '{DEFAULT_SCHEDULER}'])"
    )


def decided_pod_expression() -> str:
    """False (not sent) for a Pod whose decision quotaguard already made: stamped, without a
    re-applied plain nvidia.com/gpu next to a class, and either made by kube-controller-manager
    from a template decided at its owner (mutation would answer it without a patch) or queued
    and gated by Kueue after quotaguard's mutation (the API server's reinvocation). A Pod that
    carries all that by hand is still queued by Kueue (the label) and judged by validation (the
    queue is the tenant's, the classes are allowed; with the Volcano backend the default
    scheduler is refused). Anything odd is sent."""
    re_applied = match_expression(BY_ID["Pod"], _PLAIN_NEXT_TO_ANOTHER)
    either = (
        f"(\n{_indent(_made_by_a_kube_controller())})\n"
        f"|| (\n{_indent(_queued_and_gated_by_kueue())})"
    )
    decided = f"{_stamped()}\n&& !(\n{_indent(re_applied)})\n&& (\n{_indent(either)})"
    return f"!(\n{_indent(decided)})"


def _conditions(
    kind: Kind, operation: Operation, mutating: bool, resources: bool | None
) -> list[Manifest]:
    condition_name, expression = REQUESTS_NVIDIA, match_expression(kind, claims=True)
    if kind.components is not None:
        condition_name = HAS_COMPONENTS
    if kind.id == "Pod" and operation == "UPDATE":
        condition_name = PLAIN_GPU_NEXT_TO_ANOTHER
        expression = match_expression(kind, _PLAIN_NEXT_TO_ANOTHER)
    conditions = [{"name": condition_name, "expression": expression}]
    if kind.id == "Pod" and operation == "CREATE" and mutating:
        conditions.append({"name": NOT_YET_DECIDED, "expression": decided_pod_expression()})
    if resources is not None:
        conditions.append(
            {
                "name": RESOURCES_CHANGED if resources else RESOURCES_UNCHANGED,
                "expression": resources_changed_expression(kind, resources),
            }
        )
    return conditions


def _webhook(
    kind: Kind, path: str, operation: Operation, *, resources: bool | None = None
) -> Manifest:
    """One webhook; `resources` (validation of UPDATEs only): True for the updates that change
    some container's resources (failurePolicy Fail), False for those that do not (Ignore)."""
    mutating = path == "mutate"
    fails_closed = operation == "CREATE" or resources is True
    hook: Manifest = {
        "name": webhook_name(kind, path, operation, resources=resources is True),
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": 5 if fails_closed else 3,
        "failurePolicy": "Fail" if fails_closed else "Ignore",
        "matchPolicy": "Equivalent",
    }
    if mutating:
        hook["reinvocationPolicy"] = "IfNeeded"
    hook["clientConfig"] = {"service": {**SERVICE, "path": f"/{path}"}}
    hook["namespaceSelector"] = {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": list(EXEMPT_NAMESPACES),
            },
            {"key": IGNORE_LABEL, "operator": "NotIn", "values": ["true"]},
        ]
    }
    hook["rules"] = [
        {
            "apiGroups": [kind.group],
            "apiVersions": list(kind.versions),
            "resources": [kind.resource],
            "operations": [operation],
            "scope": "Namespaced",
        }
    ]
    hook["matchConditions"] = _conditions(kind, operation, mutating, resources)
    return hook


def _sent(kind: Kind, path: str, operation: Operation) -> bool:
    # A Pod's updates are frequent and its resources cannot change: validation is not sent them.
    return not (kind.id == "Pod" and path == "validate" and operation == "UPDATE")


def _splits_updates(kind: Kind, path: str, operation: Operation) -> bool:
    """Validation of a workload's UPDATE comes in two webhooks: the updates that change a
    container's resources (a GPU gained or changed must be decided: Fail) and all others
    (Kueue's unsuspend, labels, a moved queue: Ignore)."""
    return path == "validate" and operation == "UPDATE" and kind.id != "Pod"


def webhooks(path: Literal["mutate", "validate"]) -> list[Manifest]:
    """Every webhook of one configuration: CREATE for each kind, then UPDATE for each, then
    (validation) the DRA claim objects' CREATE. The validating UPDATEs that change container
    resources are in `resources_webhooks`."""
    operations: tuple[Operation, ...] = ("CREATE", "UPDATE")
    found = []
    for operation in operations:
        for kind in KINDS:
            if not _sent(kind, path, operation):
                continue
            split = _splits_updates(kind, path, operation)
            found.append(_webhook(kind, path, operation, resources=False if split else None))
    if path == "validate":
        found.extend(_claim_webhook(plural, devices) for plural, devices in CLAIM_RESOURCES)
    return found


def resources_webhooks() -> list[Manifest]:
    """The validating UPDATEs that change a workload's container resources, one per kind."""
    return [
        _webhook(kind, "validate", "UPDATE", resources=True)
        for kind in KINDS
        if _splits_updates(kind, "validate", "UPDATE")
    ]


def claim_expression(devices: tuple[str, ...]) -> str:
    """A ResourceClaimTemplate or ResourceClaim that asks for devices, not made by Kubernetes
    for a pod (from a pod's template, or for an extended resource backed by DRA)."""
    value, checks = "object", []
    for step in devices:
        value = f"{value}.{step}"
        checks.append(f"has({value}) && type({value}) == map")
    requests = f"{value}.requests"
    made_by = _quoted_lines(list(CLAIM_MAKERS))
    return (
        "\n&& ".join(checks)
        + f"\n&& has({requests}) && type({requests}) == list && size({requests}) > 0\n"
        "&& !(has(request.userInfo) && has(request.userInfo.username)\n"
        f"  && request.userInfo.username in [\n{_indent(_indent(made_by))}])"
    )


def _claim_webhook(plural: str, devices: tuple[str, ...]) -> Manifest:
    """The DRA claim objects created in tenant namespaces are judged before any pod names
    them (their specs cannot change: UPDATE is not sent)."""
    hook: Manifest = {
        "name": f"{plural}.validate.quotaguard.dev",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "clientConfig": {"service": {**SERVICE, "path": "/validate"}},
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": list(EXEMPT_NAMESPACES),
                },
                {"key": IGNORE_LABEL, "operator": "NotIn", "values": ["true"]},
            ]
        },
        "rules": [
            {
                "apiGroups": [DRA_GROUP],
                "apiVersions": ["v1"],
                "resources": [plural],
                "operations": ["CREATE"],
                "scope": "Namespaced",
            }
        ],
        "matchConditions": [
            {"name": CLAIM_ASKS_FOR_DEVICES, "expression": claim_expression(devices)}
        ],
    }
    return hook


def _configuration(kind: str, name: str, hooks: list[Manifest]) -> Manifest:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "quotaguard",
                "app.kubernetes.io/component": "webhook",
            },
        },
        "webhooks": hooks,
    }


def configuration(path: Literal["mutate", "validate"]) -> Manifest:
    """The mutating configuration, or the validating one without the resource-change hooks."""
    if path == "mutate":
        return _configuration("MutatingWebhookConfiguration", MUTATING, webhooks(path))
    return _configuration("ValidatingWebhookConfiguration", VALIDATING, webhooks(path))


def resources_configuration() -> Manifest:
    return _configuration(
        "ValidatingWebhookConfiguration", VALIDATING_RESOURCES, resources_webhooks()
    )


def configurations(extra_names: Iterable[str] = ()) -> list[Manifest]:
    """Every webhook configuration quotaguard registers, in the order they are written; with
    `extra_names` (ExtraNameError when one is not a resource name) they send those too."""
    names = checked_names(extra_names)
    built = [configuration("mutate"), configuration("validate"), resources_configuration()]
    return [widened_configuration(config, names) for config in built] if names else built


def pilot_patches() -> list[Manifest]:
    """The pilot component's strategic-merge patches: every webhook Ignore, on labelled
    namespaces only (the exemptions still hold)."""
    found = []
    for config in configurations():
        found.append(
            {
                "apiVersion": config["apiVersion"],
                "kind": config["kind"],
                "metadata": {"name": config["metadata"]["name"]},
                "webhooks": [
                    {
                        "name": hook["name"],
                        "failurePolicy": "Ignore",
                        "namespaceSelector": {"matchLabels": {PILOT_LABEL: "true"}},
                    }
                    for hook in config["webhooks"]
                ],
            }
        )
    return found


FILES: dict[str, tuple[Callable[[], Manifest], str]] = {
    "webhook/mutatingwebhookconfiguration.yaml": (lambda: configuration("mutate"), MUTATING_HEADER),
    "webhook/validatingwebhookconfiguration.yaml": (
        lambda: configuration("validate"),
        VALIDATING_HEADER,
    ),
    "webhook/validatingwebhookconfiguration-resources.yaml": (
        resources_configuration,
        VALIDATING_RESOURCES_HEADER,
    ),
}
PILOT_FILE = "config/components/pilot/webhooks-patch.yaml"


class _Dumper(yaml.SafeDumper):
    """Block scalars for the CEL, and lists indented under their key, as the files were
    written by hand."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
    flow = bool(value) and all(isinstance(item, str) and "\n" not in item for item in value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_Dumper.add_representer(str, _string)
_Dumper.add_representer(list, _list)


def _dump(documents: list[Manifest]) -> str:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, width=200)


def render(extra_names: Iterable[str] = ()) -> dict[str, str]:
    """Repository path -> text of every generated file; with `extra_names` (a policy's names
    beyond the default ones, `quotaguard registrations`) the webhook configurations send those
    too (the pilot's patches name only webhooks: the same either way)."""
    names = checked_names(extra_names)
    generated = GENERATED if not names else generated_for(names)
    files = {
        path: generated + header + _dump([widened_configuration(build(), names)])
        for path, (build, header) in FILES.items()
    }
    files[PILOT_FILE] = GENERATED + PILOT_HEADER + _dump(pilot_patches())
    return files
