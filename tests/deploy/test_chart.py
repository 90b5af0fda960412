"""The Helm chart charts/quotaguard beyond what it shares with config/ (test_manifests.py runs
every check on both): `helm lint`, its values (policy, certificates, release namespace, image)
and webhook configurations that stay those of webhook/."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from quotaguard.policy.loader import load_policy_text
from tests.deploy.manifests import (
    CHART,
    CONFIG,
    WEBHOOK,
    Manifest,
    find,
    helm_template,
    load_yaml,
    one,
    parse,
    pod_spec,
    run_helm,
)


def test_helm_lint_passes_strict() -> None:
    result = run_helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    "values",
    [
        ["certificates.source=certManager"],
        ["pilot.enabled=true", "manageQueues=true", "prometheus.enabled=true"],
        ["policy.existingConfigMap=team-policy"],
    ],
)
def test_helm_lint_passes_with_every_component(values: list[str]) -> None:
    argv = ["lint", "--strict", str(CHART)]
    for value in values:
        argv += ["--set", value]
    result = run_helm(*argv)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def default_chart() -> list[Manifest]:
    return helm_template()


def test_default_install_leaves_the_namespace_to_helm(default_chart: list[Manifest]) -> None:
    # `helm install --create-namespace` creates it; a Namespace in the chart would then clash.
    assert not find(default_chart, "Namespace")


def source_webhook_configurations() -> list[Manifest]:
    return [
        d
        for path in sorted(WEBHOOK.glob("*.yaml"))
        for d in load_yaml(path)
        if d.get("kind", "").endswith("WebhookConfiguration")
    ]


def without_release_labels(doc: Manifest) -> Manifest:
    doc = copy.deepcopy(doc)
    labels = doc["metadata"]["labels"]
    for key in (
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
    ):
        labels.pop(key)
    return doc


def test_chart_webhook_configurations_are_the_ones_of_webhook_dir(
    default_chart: list[Manifest],
) -> None:
    """The chart reads webhook/*.yaml (files/webhook links there): a webhook added or renamed
    there is in both builds, unchanged."""
    rendered = [
        without_release_labels(d)
        for d in default_chart
        if d.get("kind", "").endswith("WebhookConfiguration")
    ]
    assert sorted(rendered, key=lambda d: d["kind"]) == sorted(
        source_webhook_configurations(), key=lambda d: d["kind"]
    )


def test_release_namespace_is_served_and_exempt() -> None:
    docs = helm_template(namespace="gpu-admission")
    for config in docs:
        if not config["kind"].endswith("WebhookConfiguration"):
            continue
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == "gpu-admission"
            (exempt,) = [
                e
                for e in hook["namespaceSelector"]["matchExpressions"]
                if e["key"] == "kubernetes.io/metadata.name"
            ]
            assert exempt["values"] == ["kube-system", "gpu-admission"]
    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert namespaced and all(d["metadata"]["namespace"] == "gpu-admission" for d in namespaced)
    (job,) = [d for d in find(docs, "Job")]
    args = pod_spec(job)["containers"][0]["args"]
    assert args[args.index("--namespace") + 1] == "gpu-admission"
    binding = one(docs, "ClusterRoleBinding", "quotaguard-controller")
    assert binding["subjects"][0]["namespace"] == "gpu-admission"


def test_policy_from_a_file() -> None:
    text = (CONFIG / "policy.yaml").read_text().replace("gpu-platform", "team-gpus", 1)
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        result = run_helm(
            "template",
            "q",
            str(CHART),
            "-n",
            "quotaguard-system",
            "--set-file",
            f"policy.content={f.name}",
        )
    assert result.returncode == 0, result.stderr
    docs = parse(result.stdout)
    config_map = one(docs, "ConfigMap", "quotaguard-policy")
    assert config_map["data"]["policy.yaml"] == text
    assert load_policy_text(text, "policy").name == "team-gpus"


def test_policy_from_an_existing_configmap() -> None:
    docs = helm_template(
        "policy.existingConfigMap=team-policy", "policy.existingConfigMapKey=gpus.yaml"
    )
    assert not find(docs, "ConfigMap")
    for name in ("quotaguard-webhook", "quotaguard-controller"):
        (volume,) = [
            v for v in pod_spec(one(docs, "Deployment", name))["volumes"] if v["name"] == "policy"
        ]
        assert volume["configMap"] == {
            "name": "team-policy",
            "items": [{"key": "gpus.yaml", "path": "policy.yaml"}],
        }


def test_provided_certificates_put_the_ca_into_every_webhook() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    docs = helm_template("certificates.source=provided", f"certificates.caBundle={pem}")
    assert not [d for d in docs if d["metadata"]["name"].startswith("quotaguard-certs")]
    bundles = {
        hook["clientConfig"]["caBundle"]
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for hook in d["webhooks"]
    }
    assert bundles == {base64.b64encode(pem.encode()).decode()}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["certificates.source=vault"], "at '/certificates/source': value must be one of"),
        (["certificates.source=provided"], "certificates.caBundle is required"),
        (["controller.mode=dry"], "at '/controller/mode': value must be one of"),
        (["controller.prometheusUrl=prometheus:9090"], "at '/controller/prometheusUrl'"),
        (["webhook.replicas=0"], "at '/webhook/replicas'"),
        (["webhook.replica=3"], "additional properties 'replica' not allowed"),
    ],
)
def test_bad_values_are_refused_with_a_message(values: list[str], message: str) -> None:
    argv = ["template", "q", str(CHART)]
    for value in values:
        argv += ["--set", value]
    result = run_helm(*argv)
    assert result.returncode != 0
    assert message in result.stderr


def test_image_tag_digest_and_replicas_are_values() -> None:
    docs = helm_template(
        "image.repository=registry.example.com/quotaguard",
        "image.tag=0.2.0",
        "webhook.replicas=3",
        "controller.mode=off",
    )
    images: set[str] = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "Job", "CronJob")
        for c in pod_spec(d)["containers"]
    }
    assert images == {"registry.example.com/quotaguard:0.2.0"}
    assert one(docs, "Deployment", "quotaguard-webhook")["spec"]["replicas"] == 3
    args: Any = pod_spec(one(docs, "Deployment", "quotaguard-controller"))["containers"][0]["args"]
    assert args[-2:] == ["--mode", "off"]
    docs = helm_template("controller.prometheusUrl=http://prometheus-operated.monitoring:9090")
    args = pod_spec(one(docs, "Deployment", "quotaguard-controller"))["containers"][0]["args"]
    assert args[-2:] == ["--prometheus-url", "http://prometheus-operated.monitoring:9090"]
    digest = "sha256:" + "a" * 64
    docs = helm_template(f"image.digest={digest}")
    (container,) = pod_spec(one(docs, "Deployment", "quotaguard-webhook"))["containers"]
    assert container["image"] == f"quotaguard@{digest}"
