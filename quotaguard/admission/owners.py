"""Who may vouch for an object's owner: the controllers that create objects from templates.

An object whose `ownerReferences` names a Job (or any handled kind) and which carries the
tenant stamp is not decided again: its template was decided at the owner. Anyone may write an
owner reference and a stamp into a Pod, though, so they are believed only when the request
comes from a controller that creates such objects: kube-controller-manager's workload
controllers (with `--use-service-account-credentials` each has its own service account;
without it they all act as `system:kube-controller-manager`), and the operators a policy lists
in `spec.trustedControllers` (the JobSet, LeaderWorkerSet, KubeRay, Kubeflow or Volcano
controllers, under the service account they were installed with). From anyone else such an
object is judged as if it had no owner.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotaguard.policy.model import TenantPolicy

_KUBE_SYSTEM = "system:serviceaccount:kube-system:"
# kube-controller-manager's controllers that create pods or workload objects from templates.
KUBE_CONTROLLERS: frozenset[str] = frozenset(
    {
        "system:kube-controller-manager",
        *(
            _KUBE_SYSTEM + name
            for name in (
                "job-controller",
                "cronjob-controller",
                "replicaset-controller",
                "deployment-controller",
                "statefulset-controller",
            )
        ),
    }
)


def username_of(user_info: object) -> str | None:
    """`request.userInfo.username`, None when absent or not a string."""
    if not isinstance(user_info, Mapping):
        return None
    username = user_info.get("username")
    return username if isinstance(username, str) else None


def trusted_creator(policy: TenantPolicy, user_info: object) -> bool:
    """Whether the request comes from a controller whose owner references are believed."""
    username = username_of(user_info)
    return username is not None and (
        username in KUBE_CONTROLLERS or username in policy.spec.trusted_controllers
    )
