"""The one way quotaguard connects to an API server: a kubeconfig file, or in-cluster."""

from __future__ import annotations

from typing import Any


def api_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    pool_size: int | None = None,
    retries: int | None = None,
) -> Any:
    """A `kubernetes.client.ApiClient` from `kubeconfig`; without one, the pod's service
    account when running in a cluster, else the default kubeconfig."""
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # untyped module
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(context=context, client_configuration=configuration)
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    if retries is not None:
        configuration.retries = retries
    return client.ApiClient(configuration)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call (the client's ApiException), else None."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None
