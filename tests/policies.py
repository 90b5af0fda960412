"""The one builder of tenant policies for tests: a policy document as a user writes it, with
only what a test is about spelt out (`policy(tenants, classes=..., **spec)`), as a model or
as YAML text for the command line.

Tests of `quotaguard validate` keep their policies as YAML text written out in full: where a
problem is (FILE:LINE:COLUMN) is what they check.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from quotaguard.policy.model import API_VERSION, KIND, TenantPolicy

Document = dict[str, Any]
PRODUCT_LABEL = "nvidia.com/gpu.product"
A100_PRODUCT = "NVIDIA-A100-SXM4-80GB"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"

# Classes on a resource of their own: the simplest cases of the planner.
H100 = {"name": "h100", "resource": "nvidia.com/gpu", "memory": "80Gi"}
A100 = {"name": "a100", "resource": "nvidia.com/a100", "memory": "40Gi"}
# Two GPU models on the one resource `nvidia.com/gpu`, told apart by their nodes (what a list
# of rewrite targets, `to: [h100, a100]`, leaves Kueue to choose between).
A100_MODEL = {
    "name": "a100",
    "resource": "nvidia.com/gpu",
    "memory": "80Gi",
    "nodeSelector": {PRODUCT_LABEL: A100_PRODUCT},
}
H100_MODEL = {
    "name": "h100",
    "resource": "nvidia.com/gpu",
    "memory": "80Gi",
    "nodeSelector": {PRODUCT_LABEL: H100_PRODUCT},
}
MIG_1G = {"name": "mig-1g", "resource": "nvidia.com/mig-1g.10gb", "memory": "10Gi", "slices": 1}
MIG_2G = {"name": "mig-2g", "resource": "nvidia.com/mig-2g.20gb", "memory": "20Gi", "slices": 2}
MIG_3G = {"name": "mig-3g", "resource": "nvidia.com/mig-3g.40gb", "memory": "40Gi", "slices": 3}

# Classes of NVIDIA's DRA driver: whole GPUs of two models (gpu.nvidia.com), MIG profiles
# (mig.nvidia.com).
DRA_H100 = {
    "name": "h100",
    "memory": "80Gi",
    "dra": {
        "deviceClassName": "gpu.nvidia.com",
        "attributes": {"gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3"},
    },
}
DRA_A100 = {
    "name": "a100",
    "memory": "80Gi",
    "dra": {
        "deviceClassName": "gpu.nvidia.com",
        "selector": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'",
    },
}
DRA_MIG_1G = {
    "name": "mig-1g",
    "memory": "10Gi",
    "slices": 1,
    "dra": {
        "deviceClassName": "mig.nvidia.com",
        "attributes": {"gpu.nvidia.com/profile": "1g.10gb"},
    },
}
DRA_MIG_3G = {
    "name": "mig-3g",
    "memory": "40Gi",
    "slices": 3,
    "dra": {
        "deviceClassName": "mig.nvidia.com",
        "attributes": {"gpu.nvidia.com/profile": "3g.40gb"},
    },
}


def document(
    tenants: Sequence[Mapping[str, Any]],
    *,
    classes: Sequence[Mapping[str, Any]] = (H100,),
    name: str = "example",
    **spec: Any,
) -> Document:
    """The policy document: `classes` as `gpuClasses`, `tenants` (each in the namespace of its
    own name unless it says otherwise) and any other field of `spec` by its YAML name."""
    written = [copy.deepcopy(dict(tenant)) for tenant in tenants]
    for tenant in written:
        tenant.setdefault("namespaces", [tenant["name"]])
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"gpuClasses": copy.deepcopy(list(classes)), "tenants": written, **spec},
    }


def policy(
    tenants: Sequence[Mapping[str, Any]],
    *,
    classes: Sequence[Mapping[str, Any]] = (H100,),
    name: str = "example",
    **spec: Any,
) -> TenantPolicy:
    """`document(...)` as the model every reader of a policy builds."""
    return TenantPolicy.model_validate(document(tenants, classes=classes, name=name, **spec))


def policy_text(
    tenants: Sequence[Mapping[str, Any]],
    *,
    classes: Sequence[Mapping[str, Any]] = (H100,),
    name: str = "example",
    **spec: Any,
) -> str:
    """`document(...)` as a YAML file's text, for the command line."""
    built = document(tenants, classes=classes, name=name, **spec)
    return yaml.safe_dump(built, sort_keys=False)
