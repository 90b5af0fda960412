"""The one way quotaguard connects to an API server: kubeconfig files or in-cluster, found in
kubectl's order."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class NoClusterConfig(Exception):
    """Nothing says which cluster to talk to; the message lists where quotaguard looked."""


@dataclass(frozen=True)
class ConfigSource:
    """Where the cluster configuration comes from: kubeconfig files (merged in order, as
    kubectl merges the paths of KUBECONFIG) or the pod's service account."""

    files: tuple[str, ...] = ()
    in_cluster: bool = False


def config_source(
    flag: str | None,
    environ: Mapping[str, str],
    *,
    exists: Callable[[str], bool] = os.path.exists,
    home: str | None = None,
) -> ConfigSource:
    """kubectl's order: --kubeconfig, then the paths in $KUBECONFIG, then ~/.kube/config, then
    in-cluster (a pod's service account, when KUBERNETES_SERVICE_HOST is set)."""
    if flag:
        return ConfigSource(files=(flag,))
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    present = tuple(p for p in listed if exists(p))
    if present:
        return ConfigSource(files=present)
    default = os.path.join(home or os.path.expanduser("~"), ".kube", "config")
    if not listed and exists(default):
        return ConfigSource(files=(default,))
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return ConfigSource(in_cluster=True)
    looked = ", ".join(listed) if listed else default
    raise NoClusterConfig(
        f"no cluster configuration: no --kubeconfig, {looked} not found, and not running "
        "in a pod (pass --kubeconfig FILE or set KUBECONFIG)"
    )


def api_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    pool_size: int | None = None,
    retries: int | None = None,
) -> Any:
    """A `kubernetes.client.ApiClient` for the cluster `config_source` finds (kubectl's order).
    Raises NoClusterConfig when there is none."""
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # untyped module
    configuration = client.Configuration()
    source = config_source(kubeconfig, os.environ)
    if source.in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    else:
        if not os.path.exists(source.files[0]):
            raise NoClusterConfig(f"{source.files[0]}: no such file")
        config.load_kube_config(  # the client merges a PATH-separated list as kubectl does
            config_file=os.pathsep.join(source.files),
            context=context,
            client_configuration=configuration,
        )
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    if retries is not None:
        configuration.retries = retries
    return client.ApiClient(configuration)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call (the client's ApiException), else None."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def api_client_from_kubeconfig(
    document: Mapping[str, Any], *, request_retries: int = 0, pool_size: int = 4
) -> Any:
    """A `kubernetes.client.ApiClient` from a kubeconfig already read (a MultiKueue worker's,
    from a Secret): its current context, no retries (an unreachable worker is reported, not
    waited for). Raises ValueError when the kubeconfig cannot be used."""
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # untyped module
    configuration = client.Configuration()
    try:
        config.load_kube_config_from_dict(dict(document), client_configuration=configuration)
    except Exception as exc:  # the loader's many failure types all mean "unusable"
        raise ValueError(f"unusable kubeconfig: {exc}".splitlines()[0]) from exc
    configuration.retries = request_retries
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)
