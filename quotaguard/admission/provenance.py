"""GPU requests that would escape the decision: refused at creation, and at update.

Two ways an object that names an owner would get GPUs nobody queued, both refused here (in the
mutating and the validating call, so the answer is the same whichever runs):

- Made by someone other than the owner's controller, when the owner is a kind Kueue manages:
  Kueue walks from the object to that owner, finds it managed, and neither gates nor accounts
  the object (a tenant's own GPU Pod naming its own queued Job as controller).
- A new ReplicaSet of a Deployment whose template carries no decision record for the GPUs it
  asks for. The Deployment controller compares each ReplicaSet's template with the
  Deployment's: a ReplicaSet rewritten here would never match, and the controller would make a
  new one, again and again. The decision belongs to the Deployment (its CREATE and any UPDATE
  that changes its GPUs are decided), so such a ReplicaSet is refused, never rewritten. The
  other controllers do not compare: the StatefulSet controller tells its Pods' revisions by a
  label, the CronJob controller never looks back at its Jobs, so their undecided objects are
  decided (rewritten and queued) as before.

And an update that changes a template's GPU requests must arrive decided (`undecided_update`):
mutation decides it like a CREATE and records the decision; when mutation did not run (its
UPDATE webhook fails open), validation, which fails closed for such updates, refuses it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from quotaguard.admission.decision import Decision, Denial, deny
from quotaguard.admission.names import DECIDED_ANNOTATION
from quotaguard.admission.owners import (
    Owners,
    controllers_of,
    kueue_managed_owner,
    username_of,
)
from quotaguard.admission.reading import Reading, reading_of
from quotaguard.admission.workload import (
    TemplateView,
    as_map,
    changed_views,
    decision_holds,
    has_gpus,
    owned_by_workload,
)
from quotaguard.kube.names import KUEUE_QUEUE_LABEL
from quotaguard.policy.model import Tenant, TenantPolicy

# Owner kind -> the kind of the objects its controller makes and compares with its own template.
TEMPLATE_COMPARED: Mapping[str, str] = {"Deployment": "ReplicaSet"}


def refused_creation(
    policy: TenantPolicy,
    obj: Mapping[str, Any],
    namespace: str,
    user_info: object,
    owners: Owners,
    *,
    creator_trusted: bool,
    name: object = None,
    reading: Reading | None = None,
) -> Decision | None:
    """The denial for a GPU object of a tenant created under an owner it may not claim, None
    for every other object (bare objects return at the first check). `owners`: the object's
    (see `owner_kinds`); `name`: the request's (empty for a generated name); `reading`: the
    engine's reading of `obj`."""
    owner = kueue_managed_owner(owners)
    if owner is None:
        return None
    kind, reference = owner
    username = username_of(user_info)
    controllers = controllers_of(policy, kind.id)
    foreign = policy.spec.backend == "kueue" and not (
        username in controllers or username in policy.spec.trusted_controllers
    )
    read = reading_of(obj, policy.gpu_resources, reading)
    compared = kind.id in TEMPLATE_COMPARED and TEMPLATE_COMPARED[kind.id] == read.kind_id
    # The common case, a controller's Pod, is done here: its templates are read once, later.
    if not (foreign or compared) or policy.exempt(namespace):
        return None
    tenant = policy.tenant_of(namespace)
    if tenant is None:
        return None
    views = read.views
    if not has_gpus(views):
        return None
    if foreign:
        denial = _foreign(_name(obj, name), tenant, kind.kind, reference, username, controllers)
        return _refused(tenant, denial)
    if not owned_by_workload(obj, views, creator_trusted=creator_trusted):
        return _refused(tenant, _undecided_child(_name(obj, name), tenant, kind.kind, reference))
    return None


def _refused(tenant: Tenant, denial: Denial) -> Decision:
    return deny([denial], audit={"tenant": tenant.name})


def _name(obj: Mapping[str, Any], name: object) -> str:
    kind = obj.get("kind")
    what = kind if isinstance(kind, str) else "object"
    return f'{what} "{name}"' if isinstance(name, str) and name else f"this {what}"


def _owner_name(kind: str, reference: Mapping[str, Any]) -> str:
    name = reference.get("name")
    return f'{kind} "{name}"' if isinstance(name, str) else kind


def _foreign(
    what: str,
    tenant: Tenant,
    kind: str,
    reference: Mapping[str, Any],
    username: str | None,
    controllers: tuple[str, ...],
) -> Denial:
    creator = username or "an unnamed user"
    expected = ", ".join(controllers) or "none configured"
    return Denial(
        "owner-not-controller",
        f'tenant "{tenant.name}": {what} names {_owner_name(kind, reference)} as its '
        f"controller but was created by {creator}, not by the {kind} controller ({expected}); "
        f"Kueue accounts such an object through its {kind} and would not queue it: create it "
        f"without that ownerReference (quotaguard queues it) or let the {kind} create it (the "
        f"policy's spec.ownerControllers names a {kind} controller installed elsewhere)",
    )


def _undecided_child(what: str, tenant: Tenant, kind: str, reference: Mapping[str, Any]) -> Denial:
    owner = _owner_name(kind, reference)
    return Denial(
        "undecided-template",
        f'tenant "{tenant.name}": {what} of {owner} asks for GPUs quotaguard did not '
        f"decide on the {kind} (its pod template has no {DECIDED_ANNOTATION} record of these "
        f"GPU requests), and it is not rewritten here: the {kind} controller would replace a "
        f"rewritten copy again and again. Update the {kind} (`kubectl rollout restart "
        f"{kind.lower()}/{reference.get('name', '...')}`), so quotaguard decides its GPUs",
    )


def undecided_update(
    policy: TenantPolicy,
    tenant: Tenant,
    reading: Reading,
    old_views: list[TemplateView],
) -> Iterator[Denial]:
    """For an UPDATE of a tenant's object: the templates whose GPU requests changed without
    the decision record mutation writes for them, and, with Kueue, a queue label missing where
    mutation puts it."""
    changed = changed_views(reading.views, old_views)
    if not changed:
        return
    who = f'tenant "{tenant.name}": '
    retry = (
        "quotaguard's mutating webhook did not decide this update (it may have been "
        "unreachable): retry it"
    )
    for view in changed:
        if not decision_holds(view):
            where = f"the {view.name} template" if view.name else "the pod template"
            yield Denial(
                "undecided-template",
                f"{who}this update changes the GPU requests of {where}, but they carry no "
                f"{DECIDED_ANNOTATION} record of them; {retry}",
            )
    if policy.spec.backend != "kueue":
        return
    for pointer, metadata in reading.queue_label_metadata():
        if not as_map(metadata.get("labels")).get(KUEUE_QUEUE_LABEL):
            where = pointer.lstrip("/").replace("/", ".")
            yield Denial(
                "undecided-template",
                f"{who}this update changes GPU requests but leaves {where} without the "
                f"{KUEUE_QUEUE_LABEL} label, so Kueue would not queue them; {retry}",
            )
