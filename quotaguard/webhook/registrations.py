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

from typing import Any, Literal

import yaml

from quotaguard.admission.names import DEFAULT_SCHEDULER, TENANT_ANNOTATION
from quotaguard.admission.owners import KUBE_CONTROLLERS
from quotaguard.kube.dra import RESOURCE_GROUP as DRA_GROUP
from quotaguard.kube.kinds import BY_ID, KINDS, OWNER_KINDS, Kind, Step, parse_path
from quotaguard.kube.names import KUEUE_ADMISSION_GATE, KUEUE_QUEUE_LABEL

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
REQUESTS_NVIDIA = "requests-gpus"  # an nvidia.com/ resource, or DRA claims
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

_ANY_NVIDIA = "c.resources[section].exists(name, name.startsWith('nvidia.com/'))"
_PLAIN_NEXT_TO_ANOTHER = (
    "'nvidia.com/gpu' in c.resources[section]\n"
    "&& c.resources[section].exists(name, name != 'nvidia.com/gpu'"
    " && name.startsWith('nvidia.com/'))"
)


def webhook_name(kind: Kind, path: str, operation: Operation) -> str:
    """`pods.mutate.quotaguard.dev`, `rayjobs-update.validate.quotaguard.dev`."""
    suffix = "-update" if operation == "UPDATE" else ""
    return f"{kind.id.lower()}s{suffix}.{path}.quotaguard.dev"


def _containers(spec: str, resources_check: str) -> str:
    """Some container of the pod spec `spec` names a resource `resources_check` accepts."""
    return (
        f"['initContainers', 'containers'].exists(field, field in {spec}"
        f" && type({spec}[field]) == list\n"
        f"  && {spec}[field].exists(c, type(c) == map && 'resources' in c"
        " && type(c.resources) == map\n"
        "    && ['limits', 'requests'].exists(section, section in c.resources\n"
        "      && type(c.resources[section]) == map\n"
        f"      && {resources_check})))"
    )


def _requirements(value: str) -> str:
    """The ResourceRequirements map `value` names an nvidia.com/ resource."""
    return (
        f"['limits', 'requests'].exists(section, section in {value}"
        f" && type({value}[section]) == map\n"
        f"  && {value}[section].exists(name, name.startsWith('nvidia.com/')))"
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
        if place.form == "resources":
            leaf = "type({value}) == map\n&& " + _requirements("{value}")
        elif claims:
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
        if place.form == "resources":
            branches[-1] = _along("object", place.steps, leaf)
    if len(branches) == 1:
        return branches[0]
    return "\n|| ".join(f"({branch})" for branch in branches)


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
    """The Pod carries the tenant stamp quotaguard's mutation writes."""
    return (
        "has(object.metadata) && type(object.metadata) == map\n"
        f"&& {_metadata_map('annotations')}\n"
        f"&& {_non_empty_string('object.metadata.annotations', TENANT_ANNOTATION)}"
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


def _conditions(kind: Kind, operation: Operation, mutating: bool) -> list[Manifest]:
    condition_name, expression = REQUESTS_NVIDIA, match_expression(kind, claims=True)
    if kind.components is not None:
        condition_name = HAS_COMPONENTS
    if kind.id == "Pod" and operation == "UPDATE":
        condition_name = PLAIN_GPU_NEXT_TO_ANOTHER
        expression = match_expression(kind, _PLAIN_NEXT_TO_ANOTHER)
    conditions = [{"name": condition_name, "expression": expression}]
    if kind.id == "Pod" and operation == "CREATE" and mutating:
        conditions.append({"name": NOT_YET_DECIDED, "expression": decided_pod_expression()})
    return conditions


def _webhook(kind: Kind, path: str, operation: Operation) -> Manifest:
    mutating = path == "mutate"
    hook: Manifest = {
        "name": webhook_name(kind, path, operation),
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": 5 if operation == "CREATE" else 3,
        "failurePolicy": "Fail" if operation == "CREATE" else "Ignore",
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
    hook["matchConditions"] = _conditions(kind, operation, mutating)
    return hook


def _sent(kind: Kind, path: str, operation: Operation) -> bool:
    # A Pod's updates are frequent and its resources cannot change: validation is not sent them.
    return not (kind.id == "Pod" and path == "validate" and operation == "UPDATE")


def webhooks(path: Literal["mutate", "validate"]) -> list[Manifest]:
    """Every webhook of one configuration: CREATE for each kind, then UPDATE for each; the
    validating one ends with the DRA claim objects' CREATE."""
    operations: tuple[Operation, ...] = ("CREATE", "UPDATE")
    found = [
        _webhook(kind, path, operation)
        for operation in operations
        for kind in KINDS
        if _sent(kind, path, operation)
    ]
    if path == "validate":
        found.extend(_claim_webhook(plural, devices) for plural, devices in CLAIM_RESOURCES)
    return found


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


def configuration(path: Literal["mutate", "validate"]) -> Manifest:
    mutating = path == "mutate"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration",
        "metadata": {
            "name": MUTATING if mutating else VALIDATING,
            "labels": {
                "app.kubernetes.io/name": "quotaguard",
                "app.kubernetes.io/component": "webhook",
            },
        },
        "webhooks": webhooks(path),
    }


def pilot_patches() -> list[Manifest]:
    """The pilot component's strategic-merge patches: every webhook Ignore, on labelled
    namespaces only (the exemptions still hold)."""
    found = []
    paths: tuple[Literal["mutate", "validate"], ...] = ("mutate", "validate")
    for path in paths:
        config = configuration(path)
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


GENERATED = (
    "# Generated by `python webhook/generate.py` from quotaguard/kube/kinds.py: do not edit.\n"
)

MUTATING_HEADER = """\
# /mutate: rewrites nvidia.com/gpu into the tenant's GPU class, places and queues the workload.
#
# CREATE: failurePolicy Fail. An object that passes unrewritten while the webhook is unreachable
# keeps its plain nvidia.com/gpu request and no queue label: it lands on a whole GPU outside the
# tenant's quota, which is exactly what quotaguard exists to prevent. The blast radius of Fail
# is kept small instead: the matchConditions send only objects that ask for an nvidia.com/
# resource or name DRA resourceClaims, kube-system, quotaguard-system and namespaces labelled
# quotaguard.dev/ignore=true are never sent, and the webhook runs 2+ replicas with a
# PodDisruptionBudget. For a first rollout use config/components/pilot/ (failurePolicy
# Ignore, one labelled namespace); see docs/deploy.md.
#
# UPDATE: webhooks of their own, failurePolicy Ignore. They put back what CREATE decided when
# an update undoes it: `kubectl apply` of an unchanged manifest adds nvidia.com/gpu back next
# to the class (custom resources: replaces the templates with the manifest's), which leaves a
# suspended Job's template with two GPU resources and makes the API server refuse the update
# of a running Job or of a Pod as "field is immutable". They never deny. Ignore, because
# Kueue's unsuspend and controllers' label updates pass through them and must not wait for
# quotaguard; an outage only brings back the re-apply problem above. Pods are sent on UPDATE
# only when a container holds a plain nvidia.com/gpu next to another nvidia.com/ resource
# (what re-applying a rewritten Pod's manifest produces), so the frequent label, annotation
# and scheduling-gate updates of GPU pods never reach quotaguard. Workload objects change
# rarely: every update of one that asks for an nvidia.com/ resource is sent.
#
# Pods on CREATE have a second condition, not-yet-decided-by-quotaguard: a Pod that already
# carries quotaguard's decision is not sent. That is a Pod with the tenant stamp
# (quotaguard.dev/tenant), no plain nvidia.com/gpu next to another nvidia.com/ resource, and
# either made by one of kube-controller-manager's workload controllers for an owner of a kind
# quotaguard handles (its template was decided at the owner: mutation would answer without a
# patch), or with Kueue's queue label, Kueue's admission gate and the default scheduler (what
# this webhook and then Kueue's leave on a bare Pod). The API server evaluates matchConditions
# again before the reinvocation IfNeeded asks for after Kueue's gate, so a bare GPU Pod costs
# two calls (mutate, validate) instead of three, and a Job's Pod one (validate) instead of two.
# The one change: such a Pod is judged by validation as it is rather than mutated again; what a
# later webhook changes is still judged by validation. A Pod written that way by hand gains
# nothing: Kueue queues it by its label, validation refuses another tenant's queue and classes
# the tenant may not use, and with the Volcano backend the default scheduler. A Volcano queue
# annotation alone is not taken as decided: with the Kueue backend such a Pod would escape
# Kueue's gate.
#
# One webhook per kind (quotaguard/kube/kinds.py), so that each matchCondition reads that
# kind's pod-template paths; a kind whose CRD is not installed is never matched. An
# AppWrapper's components are arbitrary objects that CEL cannot search: every AppWrapper with
# components is sent. The CEL checks types before descending, so an odd object is "not sent"
# rather than an evaluation error (which failurePolicy Fail would turn into a rejection); for
# not-yet-decided-by-quotaguard, odd metadata is "sent".
# caBundle is filled in by cert-manager's CA injector or by `quotaguard certs`.
#
# metadata.name sorts first: the API server calls mutating configurations in name order, and
# this one must come before Kueue's (kueue-mutating-webhook-configuration), whose webhooks gate
# a Pod or suspend a Job at creation only when the queue label quotaguard adds is already
# there; see docs/deploy.md. Keep the name as it is.
"""

VALIDATING_HEADER = """\
# /validate: denies GPU requests that break the tenant policy (see the admission contract).
#
# CREATE: failurePolicy Fail. Validation is what enforces tenant isolation (another tenant's
# queue, classes the tenant may not use, maxGPUsPerPod); with Ignore, an outage of the webhook
# would silently switch isolation off. Only objects asking for an nvidia.com/ resource are sent
# (matchConditions), so an outage blocks new GPU workloads and nothing else. The pilot
# component (config/components/pilot/) relaxes this to Ignore on one labelled namespace; see
# docs/deploy.md.
#
# UPDATE of workload objects: webhooks of their own, failurePolicy Ignore. On UPDATE only a
# changed queue is judged (Kueue lets a suspended Job move to another queue; it must stay one
# of the tenant's). Ignore, because Kueue's unsuspend passes through them and must not wait for
# quotaguard; an outage lets a queue move through unjudged, never a new workload. Pods are not
# sent on UPDATE: their updates are frequent and their resources cannot change (a queue label
# changed on a bare Pod is not judged).
#
# It runs after every mutation, on the final object, so the rewritten class resources
# (nvidia.com/mig-*, nvidia.com/gpu.shared) match the same nvidia.com/ condition.
#
# DRA: an object whose pod templates name resourceClaims is sent too (what a claim asks for is
# in a ResourceClaimTemplate or ResourceClaim that CEL cannot read). ResourceClaimTemplates and
# ResourceClaims that ask for devices are sent on CREATE (their specs cannot change), except
# those Kubernetes makes for a pod (kube-controller-manager's resource-claim controller, from
# a template judged when it was created; the scheduler, for an extended resource backed by
# DRA).
# caBundle is filled in by cert-manager's CA injector or by `quotaguard certs`.
"""

PILOT_HEADER = """\
# The pilot's webhook patches: every webhook failurePolicy Ignore, and only namespaces
# labelled quotaguard.dev/pilot=true (the exemptions of the base still hold). See
# kustomization.yaml beside this file.
"""

FILES = {
    "webhook/mutatingwebhookconfiguration.yaml": ("mutate", MUTATING_HEADER),
    "webhook/validatingwebhookconfiguration.yaml": ("validate", VALIDATING_HEADER),
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


def render() -> dict[str, str]:
    """Repository path -> text of every generated file."""
    files = {
        path: GENERATED + header + _dump([configuration(kind)])  # type: ignore[arg-type]
        for path, (kind, header) in FILES.items()
    }
    files[PILOT_FILE] = GENERATED + PILOT_HEADER + _dump(pilot_patches())
    return files
