"""The Helm chart charts/quotaguard beyond what it shares with config/ (test_manifests.py runs
every check on both): `helm lint`, its values (policy, certificates, release namespace, image,
pod placement and metadata, monitoring), its `helm test` hook, and its own copies of the
webhook configurations, alerts, dashboard and policy, which stay those of the repository."""

from __future__ import annotations

import base64
import copy
import shutil
from pathlib import Path
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
    """The chart's webhook configurations are webhook/*.yaml's: a webhook added or renamed
    there is in both builds, unchanged."""
    rendered = [
        without_release_labels(d)
        for d in default_chart
        if d.get("kind", "").endswith("WebhookConfiguration")
    ]

    def by_name(doc: Manifest) -> tuple[str, str]:
        return doc["kind"], doc["metadata"]["name"]

    assert sorted(rendered, key=by_name) == sorted(source_webhook_configurations(), key=by_name)


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


# ---- a self-contained chart -----------------------------------------------------------------


def test_chart_holds_its_own_copies_of_the_repository_files() -> None:
    """No link out of charts/ (helm warns, and a copied or packaged chart loses the file); each
    copy is its source byte for byte (`python -m tools.chart_files` refreshes them)."""
    from tools.chart_files import COPIES, stale

    links = [str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_symlink()]
    assert links == []
    assert stale() == [], "run python -m tools.chart_files"
    shipped = {str(p.relative_to(CHART / "files")) for p in (CHART / "files").rglob("*.*")}
    assert shipped == set(COPIES)


def test_a_copy_of_the_chart_renders_as_the_chart(tmp_path: Path) -> None:
    copied = tmp_path / "vendored" / "quotaguard"
    shutil.copytree(CHART, copied, symlinks=True)
    argv = ["template", "quotaguard", "--namespace", "quotaguard-system"]
    argv += ["--set", "prometheus.enabled=true"]
    here, there = run_helm(*argv, str(CHART)), run_helm(*argv, str(copied))
    assert there.returncode == 0, there.stderr
    assert "symlink" not in here.stderr + there.stderr
    assert parse(there.stdout) == parse(here.stdout)


def test_chart_copy_tool_restores_a_stale_copy(tmp_path: Path, monkeypatch: Any) -> None:
    from tools import chart_files

    root = tmp_path / "repo"
    for chart_file, source in chart_files.COPIES.items():
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).write_text(f"source of {chart_file}\n")
    monkeypatch.setattr(chart_files, "ROOT", root)
    monkeypatch.setattr(chart_files, "CHART_FILES", root / "charts" / "quotaguard" / "files")
    assert len(chart_files.stale()) == len(chart_files.COPIES)
    assert chart_files.main(["--check"]) == 1
    assert chart_files.main([]) == 0
    assert chart_files.stale() == [] and chart_files.refresh() == []
    (root / "config" / "policy.yaml").write_text("changed\n")
    assert chart_files.stale() == ["charts/quotaguard/files/policy.yaml"]


# ---- pods: metadata, placement, arguments ---------------------------------------------------


def test_pod_metadata_and_placement_values_reach_every_pod() -> None:
    docs = helm_template(
        "podAnnotations.team=platform",
        "podLabels.cost-center=gpu",
        "webhook.podAnnotations.example\\.com/owner=team-a",
        "controller.podLabels.tier=control",
        "webhook.nodeSelector.pool=system",
        "controller.tolerations[0].key=dedicated",
        "controller.tolerations[0].operator=Exists",
        "webhook.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
        "webhook.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    )
    webhook = one(docs, "Deployment", "quotaguard-webhook")["spec"]["template"]
    controller = one(docs, "Deployment", "quotaguard-controller")["spec"]["template"]
    (job,) = find(docs, "Job")
    certs = job["spec"]["template"]
    assert webhook["metadata"]["annotations"] == {
        "team": "platform",
        "example.com/owner": "team-a",
    }
    assert controller["metadata"]["annotations"] == {"team": "platform"}
    assert certs["metadata"]["annotations"] == {"team": "platform"}
    assert controller["metadata"]["labels"] == {
        "app.kubernetes.io/name": "quotaguard",
        "app.kubernetes.io/component": "controller",
        "cost-center": "gpu",
        "tier": "control",
    }
    assert certs["metadata"]["labels"]["cost-center"] == "gpu"
    assert webhook["spec"]["nodeSelector"] == {"pool": "system"}
    assert controller["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    affinity = webhook["spec"]["affinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
    }
    # The default spread over nodes stays beside it.
    (spread,) = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread["podAffinityTerm"]["labelSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "quotaguard",
        "app.kubernetes.io/component": "webhook",
    }


def test_pod_labels_cannot_take_a_pod_out_of_its_deployment() -> None:
    docs = helm_template(
        "podLabels.app\\.kubernetes\\.io/component=other",
        "webhook.podLabels.app\\.kubernetes\\.io/name=other",
    )
    for name in ("quotaguard-webhook", "quotaguard-controller"):
        deployment = one(docs, "Deployment", name)
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert {k: labels[k] for k in selector} == selector


def test_log_level_and_extra_args_follow_the_chart_arguments() -> None:
    from quotaguard.cli import build_parser

    default = helm_template()
    docs = helm_template(
        "logLevel=debug",
        "webhook.extraArgs={--webhook-reuse-port}",
        "controller.extraArgs={--prometheus-timeout=10}",
    )
    parser = build_parser()
    for name, extra in (
        ("quotaguard-webhook", ["--webhook-reuse-port"]),
        ("quotaguard-controller", ["--prometheus-timeout=10"]),
    ):
        (before,) = pod_spec(one(default, "Deployment", name))["containers"]
        (after,) = pod_spec(one(docs, "Deployment", name))["containers"]
        assert "--log-level" not in before["args"]  # info, the CLI's default
        assert after["args"] == [*before["args"], "--log-level", "debug", *extra]
        parsed = parser.parse_args(after["args"])
        assert parsed.log_level == "debug"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["logLevel=trace"], "at '/logLevel': value must be one of"),
        (["webhook.affinity.nodeAfinity.x=1"], "additional properties 'nodeAfinity' not allowed"),
        (["controller.podLabels.team=1"], "at '/controller/podLabels/team'"),
        (["prometheus.monitor=probe"], "at '/prometheus/monitor': value must be one of"),
        (["prometheus.runbookBaseURL=docs/troubleshooting.md"], "at '/prometheus/runbookBaseURL'"),
    ],
)
def test_bad_pod_and_monitoring_values_are_refused(values: list[str], message: str) -> None:
    argv = ["template", "q", str(CHART)]
    for value in values:
        argv += ["--set", value]
    result = run_helm(*argv)
    assert result.returncode != 0
    assert message in result.stderr


# ---- monitoring -----------------------------------------------------------------------------


def test_service_monitor_scrapes_both_deployments_instead_of_the_pod_monitor() -> None:
    docs = helm_template("prometheus.enabled=true", "prometheus.monitor=serviceMonitor")
    assert not find(docs, "PodMonitor")
    monitor = one(docs, "ServiceMonitor", "quotaguard")
    service = one(docs, "Service", "quotaguard-metrics")
    assert service["spec"]["clusterIP"] == "None"  # every pod a target, the standby too
    assert all(
        service["metadata"]["labels"].get(k) == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    (port,) = service["spec"]["ports"]
    assert port["name"] == "http" and port["targetPort"] == "http"
    for name in ("quotaguard-webhook", "quotaguard-controller"):
        template = one(docs, "Deployment", name)["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
        ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
        assert ports["http"] == 8080
    (job,) = find(docs, "Job")
    assert "ports" not in pod_spec(job)["containers"][0]  # selected, but no endpoint


def test_alert_runbooks_follow_the_runbook_base_value() -> None:
    base = "https://git.example.com/platform/quotaguard/-/blob/main/docs/troubleshooting.md"
    docs = helm_template("prometheus.enabled=true", f"prometheus.runbookBaseURL={base}")
    rules = [
        r for g in one(docs, "PrometheusRule", "quotaguard")["spec"]["groups"] for r in g["rules"]
    ]
    assert rules
    for rule in rules:
        assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"


# ---- helm test ------------------------------------------------------------------------------


def test_helm_test_hook_checks_the_webhook_and_the_lease_with_least_rights() -> None:
    from quotaguard.controller.leader import LEASE_NAME
    from quotaguard.serve import selfcheck

    docs = helm_template(namespace="gpu-admission")
    hooks = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook")]
    assert sorted(f"{d['kind']}/{d['metadata']['name']}" for d in hooks) == [
        "Pod/quotaguard-test",
        "Role/quotaguard-test",
        "RoleBinding/quotaguard-test",
        "ServiceAccount/quotaguard-test",
    ]
    assert {d["metadata"]["annotations"]["helm.sh/hook"] for d in hooks} == {"test"}
    pod = one(docs, "Pod", "quotaguard-test")
    # RBAC first (lower weight), then the pod.
    weights = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks}
    assert max(w for k, w in weights.items() if k != "Pod") < weights["Pod"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "quotaguard.serve.selfcheck"]
    assert container["args"] == ["--namespace", "gpu-admission"]
    assert container["image"] == "quotaguard:0.1.0"
    assert selfcheck.LEASE_NAME == LEASE_NAME
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == "quotaguard-test"
    security = {**pod["spec"]["securityContext"], **container["securityContext"]}
    assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    role = one(docs, "Role", "quotaguard-test")
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [LEASE_NAME],
            "verbs": ["get"],
        }
    ]
    binding = one(docs, "RoleBinding", "quotaguard-test")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "quotaguard-test", "namespace": "gpu-admission"}
    ]
    # The check's own default target is the Service the chart installs.
    service = one(docs, "Service", "quotaguard-webhook")
    assert service["spec"]["ports"][0]["port"] == 443
    assert service["metadata"]["name"] == selfcheck.WEBHOOK_SERVICE


# ---- the image ------------------------------------------------------------------------------


def test_default_image_is_the_one_the_documented_build_names() -> None:
    """`docker build -t quotaguard:<version> .` (the Dockerfile's header) gives the image the
    chart runs by default; a registry is a values override (docs/install.md)."""
    import quotaguard

    chart = load_yaml(CHART / "Chart.yaml")[0]
    assert chart["appVersion"] == quotaguard.__version__
    dockerfile = (CONFIG.parent / "Dockerfile").read_text()
    assert f"docker build -t quotaguard:{quotaguard.__version__} ." in dockerfile
    (container,) = pod_spec(one(helm_template(), "Deployment", "quotaguard-webhook"))["containers"]
    assert container["image"] == f"quotaguard:{quotaguard.__version__}"


def test_kueue_config_in_another_namespace_is_where_the_controller_reads_it() -> None:
    docs = helm_template("kueueConfig.enabled=true", "kueueConfig.namespace=queueing")
    assert one(docs, "ConfigMap", "kueue-manager-config")["metadata"]["namespace"] == "queueing"
    assert one(docs, "Role", "quotaguard-controller-kueue-config")["metadata"]["namespace"] == (
        "queueing"
    )
    (controller,) = [
        c
        for c in pod_spec(one(docs, "Deployment", "quotaguard-controller"))["containers"]
        if c["name"] == "controller"
    ]
    args = controller["args"]
    assert args[args.index("--kueue-namespace") + 1] == "queueing"
    default = helm_template("kueueConfig.enabled=true")
    (controller,) = pod_spec(one(default, "Deployment", "quotaguard-controller"))["containers"]
    assert "--kueue-namespace" not in controller["args"]  # kueue-system, the default
