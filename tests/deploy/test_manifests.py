"""What a platform team applies (`kubectl apply -k config/`, or the Helm chart
charts/quotaguard): safe defaults a reviewer would ask for, names that agree across files, and a
build that a bare API server accepts. Every check runs on both builds."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotaguard.certs.builders import service_dns_names
from quotaguard.cli import build_parser
from quotaguard.controller.kueue import flavor_fungibility
from quotaguard.kube.kinds import KINDS
from quotaguard.policy.fungibility import flavor_order
from quotaguard.policy.kueue_dra import device_class_mappings
from quotaguard.policy.loader import load_policy_file, load_policy_text
from quotaguard.policy.sent_names import REGISTRATIONS
from quotaguard.reports.report_routes import report_routes
from quotaguard.serve.plain_http import build_http_app
from quotaguard.serve.policystore import PolicyStore
from quotaguard.webhook.registrations import (
    CLAIM_ASKS_FOR_DEVICES,
    CLAIM_RESOURCES,
    NOT_YET_DECIDED,
    REQUESTS_NVIDIA,
)
from quotaguard.webhook.registrations import render as generated_files
from tests.deploy.manifests import (
    CONFIG,
    KUBECTL,
    REPO,
    Manifest,
    Renders,
    find,
    kustomize,
    labels_match,
    load_yaml,
    one,
    pod_spec,
    raw_manifests,
    webhooks,
    workloads,
)

NS = "quotaguard-system"
# API groups every cluster serves: the default build must not need anything else, so that
# `kubectl apply --dry-run=server -k config/` passes on a bare API server.
BUILT_IN_GROUPS = {
    "",
    "apps",
    "batch",
    "policy",
    "rbac.authorization.k8s.io",
    "scheduling.k8s.io",
    "admissionregistration.k8s.io",
    "coordination.k8s.io",
}
# Every kind of the table, at the versions it names (the table is checked against Kueue's
# kinds in tests/admission/test_kinds.py).
WEBHOOK_KINDS = {(k.group, v, k.resource) for k in KINDS for v in k.versions}
CLAIM_KINDS = {("resource.k8s.io", "v1", plural) for plural, _ in CLAIM_RESOURCES}


TOOLS = ["kustomize", "helm"]


@pytest.fixture(scope="module", params=["kustomize", "raw", "helm"])
def build(request: pytest.FixtureRequest, renders: Renders) -> list[Manifest]:
    """The default build, rendered by kustomize and by the chart, and config/'s files read raw
    (so the checks still run where kubectl is absent)."""
    if request.param == "raw":
        return raw_manifests()
    if request.param == "kustomize" and KUBECTL is None:
        pytest.skip("kubectl not installed; the raw files are checked instead")
    return renders(request.param, [])


@pytest.fixture(scope="module", params=TOOLS)
def rendered(request: pytest.FixtureRequest, renders: Renders) -> list[Manifest]:
    return renders(request.param, [])


@pytest.fixture(scope="module", params=TOOLS)
def with_cert_manager(request: pytest.FixtureRequest, renders: Renders) -> list[Manifest]:
    return renders(request.param, ["cert-manager"])


def certs_job(docs: list[Manifest]) -> Manifest:
    """The install Job of `quotaguard certs` (the chart's name carries the release revision)."""
    (job,) = [
        d
        for d in find(docs, "Job")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "certs"
    ]
    return job


def container_args(workload: Manifest) -> list[list[str]]:
    return [list(c.get("args") or []) for c in pod_spec(workload)["containers"]]


def flag_value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def flag_values(args: list[str], flag: str) -> list[str]:
    """Every value of a repeatable flag."""
    return [value for name, value in itertools.pairwise(args) if name == flag]


def deployment(docs: list[Manifest], name: str) -> Manifest:
    return one(docs, "Deployment", name)


# ---- RBAC -----------------------------------------------------------------------------------


def rbac_rules(docs: list[Manifest]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{d['kind']} {d['metadata']['name']}", rule)
        for d in docs
        if d.get("kind") in ("Role", "ClusterRole")
        for rule in d.get("rules") or []
    ]


def test_no_wildcard_in_any_rbac_rule(build: list[Manifest]) -> None:
    for where, rule in rbac_rules(build):
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert "*" not in str(rule.get(field, "")), f"{where}: wildcard in {field}"


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize(
    "components",
    [
        ["cert-manager"],
        ["pilot"],
        ["manage-queues"],
        ["prometheus"],
        ["gpu-operator-configs"],
        ["dra"],
        ["kueue-config"],
        ["scheduler-profile"],
        ["fleet"],
    ],
)
def test_no_wildcard_with_any_component(renders: Renders, tool: str, components: list[str]) -> None:
    docs = renders(tool, components)
    for where, rule in rbac_rules(docs):
        assert "*" not in str(rule), f"{where}: wildcard"


def grants(role: Manifest) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_controller_may_read_the_cluster_and_write_only_queues_and_node_layouts(
    build: list[Manifest],
) -> None:
    role = one(build, "ClusterRole", "quotaguard-controller")
    read = {"get", "list", "watch"}
    kinds = ("mutating", "validating")
    expected = (
        {("", r, v) for r in ("nodes", "pods") for v in read}
        | {("", "nodes", "patch")}  # cordon and relabel for spec.geometry, never evict
        | {("kueue.x-k8s.io", "workloads", v) for v in read}
        | {("kueue.x-k8s.io", "clusterqueues", v) for v in read | {"update", "patch"}}
        | {("scheduling.volcano.sh", "podgroups", v) for v in read}
        | {("scheduling.volcano.sh", "queues", v) for v in read | {"update", "patch"}}
        | {("", "events", v) for v in ("create", "patch")}
        | {("admissionregistration.k8s.io", f"{k}webhookconfigurations", "get") for k in kinds}
    )
    assert grants(role) == expected
    # only quotaguard's own webhook configurations (policy/sent_names.REGISTRATIONS)
    named = {
        (resource, name)
        for rule in role["rules"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames", ())
    }
    assert named == set(REGISTRATIONS)
    assert all(rule["verbs"] == ["get"] for rule in role["rules"] if rule.get("resourceNames"))


def test_controller_leader_election_is_one_named_lease_in_its_namespace(
    build: list[Manifest],
) -> None:
    from quotaguard.controller.leader import LEASE_NAME

    role = one(build, "Role", "quotaguard-controller-leader-election")
    assert role["metadata"]["namespace"] == NS
    by_verb = {verb: rule.get("resourceNames") for rule in role["rules"] for verb in rule["verbs"]}
    assert by_verb == {"get": [LEASE_NAME], "update": [LEASE_NAME], "create": None}
    binding = one(build, "RoleBinding", "quotaguard-controller-leader-election")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "quotaguard-controller", "namespace": NS}
    ]
    env = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in pod_spec(deployment(build, "quotaguard-controller"))["containers"][0]["env"]
    }
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


def bound_rules(docs: list[Manifest], account: str) -> list[dict[str, Any]]:
    """Every rule of every role bound to the service account `account`."""
    roles = {
        (d["kind"], d["metadata"]["name"]): d.get("rules") or []
        for d in docs
        if d.get("kind") in ("Role", "ClusterRole")
    }
    return [
        rule
        for d in docs
        if d.get("kind") in ("RoleBinding", "ClusterRoleBinding")
        and any(s["kind"] == "ServiceAccount" and s["name"] == account for s in d["subjects"])
        for rule in roles[d["roleRef"]["kind"], d["roleRef"]["name"]]
    ]


def test_webhook_may_only_read_runtimes_and_ask_who_reads_its_metrics(
    build: list[Manifest],
) -> None:
    """The webhook pods' token may only read the TrainJob runtimes and check the callers of
    /metrics and /reports (TokenReview, SubjectAccessReview)."""
    spec = pod_spec(deployment(build, "quotaguard-webhook"))
    assert spec["serviceAccountName"] == "quotaguard-webhook"
    assert spec["automountServiceAccountToken"] is True
    assert grants({"rules": bound_rules(build, "quotaguard-webhook")}) == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("trainer.kubeflow.org", "clustertrainingruntimes", "get"),
        ("trainer.kubeflow.org", "clustertrainingruntimes", "list"),
        ("trainer.kubeflow.org", "trainingruntimes", "get"),
        ("trainer.kubeflow.org", "trainingruntimes", "list"),
    }
    account = one(build, "ServiceAccount", "quotaguard-webhook")
    assert account["automountServiceAccountToken"] is False  # no other pod of it gets one


def test_both_deployments_may_review_the_callers_of_their_http_port(
    build: list[Manifest],
) -> None:
    for account in ("quotaguard-webhook", "quotaguard-controller"):
        assert {
            ("authentication.k8s.io", "tokenreviews", "create"),
            ("authorization.k8s.io", "subjectaccessreviews", "create"),
        } <= grants({"rules": bound_rules(build, account)}), account


def test_the_reader_role_grants_every_path_of_the_http_port_but_the_probes(
    build: list[Manifest],
) -> None:
    """A route added to the HTTP port without adding it to quotaguard-reports-reader would
    answer 403 to every reader."""
    store = PolicyStore(CONFIG / "policy.yaml")
    app = build_http_app(store, extra_routes=report_routes(None))
    served = {r.resource.canonical for r in app.router.routes() if r.method == "GET"}
    (rule,) = one(build, "ClusterRole", "quotaguard-reports-reader")["rules"]
    assert rule["verbs"] == ["get"]
    assert set(rule["nonResourceURLs"]) == served - {"/healthz", "/readyz"}


def test_certs_job_may_touch_only_its_secrets_and_webhook_configurations(
    build: list[Manifest],
) -> None:
    job = certs_job(build)
    (args,) = container_args(job)
    role = one(build, "Role", "quotaguard-certs")
    names = {flag_value(args, "--secret"), flag_value(args, "--ca-secret")}
    for rule in role["rules"]:
        assert rule["resources"] == ["secrets"]
        if rule["verbs"] == ["create"]:
            assert "resourceNames" not in rule  # RBAC cannot limit create by name
        else:
            assert set(rule["resourceNames"]) == names
            assert set(rule["verbs"]) == {"get", "update"}
    cluster_role = one(build, "ClusterRole", "quotaguard-certs")
    configurations = {
        d["metadata"]["name"] for d in build if d.get("kind", "").endswith("WebhookConfiguration")
    }
    assert {flag_value(args, "--mutating-webhook"), *flag_values(args, "--validating-webhook")} == (
        configurations
    )
    for rule in cluster_role["rules"]:
        assert set(rule["verbs"]) == {"get", "patch"}
        assert set(rule["resourceNames"]) <= configurations


# ---- pods -----------------------------------------------------------------------------------


def test_every_container_runs_restricted_with_requests_and_limits(build: list[Manifest]) -> None:
    checked = 0
    for workload in workloads(build):
        spec = pod_spec(workload)
        pod_security = spec.get("securityContext") or {}
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            where = f"{workload['kind']} {workload['metadata']['name']}/{container['name']}"
            security = {**pod_security, **(container.get("securityContext") or {})}
            assert security.get("runAsNonRoot") is True, where
            assert security.get("readOnlyRootFilesystem") is True, where
            assert security.get("allowPrivilegeEscalation") is False, where
            assert security.get("capabilities", {}).get("drop") == ["ALL"], where
            assert "add" not in security.get("capabilities", {}), where
            assert security.get("seccompProfile") == {"type": "RuntimeDefault"}, where
            resources = container.get("resources") or {}
            for section in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(section) or {}), where
            checked += 1
    assert checked == 4  # webhook, controller, certs Job, certs CronJob


def test_namespace_enforces_the_restricted_pod_security_standard(build: list[Manifest]) -> None:
    labels = one(build, "Namespace", NS)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_webhook_survives_a_node_loss_and_a_drain(build: list[Manifest]) -> None:
    webhook = deployment(build, "quotaguard-webhook")
    assert webhook["spec"]["replicas"] >= 2
    pod_labels = webhook["spec"]["template"]["metadata"]["labels"]
    spec = pod_spec(webhook)
    anti = spec["affinity"]["podAntiAffinity"]
    terms = [
        t.get("podAffinityTerm", t)
        for key in (
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        )
        for t in anti.get(key, [])
    ]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname"
        and labels_match(t["labelSelector"]["matchLabels"], pod_labels)
        for t in terms
    )
    assert any(
        c["topologyKey"] == "topology.kubernetes.io/zone" for c in spec["topologySpreadConstraints"]
    )
    budgets = [
        b
        for b in find(build, "PodDisruptionBudget")
        if labels_match(b["spec"]["selector"]["matchLabels"], pod_labels)
    ]
    assert len(budgets) == 1 and budgets[0]["spec"]["minAvailable"] >= 1
    assert webhook["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_both_deployments_use_a_priority_class_that_exists(build: list[Manifest]) -> None:
    classes = {d["metadata"]["name"] for d in find(build, "PriorityClass")}
    for name in ("quotaguard-webhook", "quotaguard-controller"):
        assert pod_spec(deployment(build, name))["priorityClassName"] in classes | {
            "system-cluster-critical"
        }


def test_probes_are_on_the_http_port_the_reports_component_serves(build: list[Manifest]) -> None:
    for name in ("quotaguard-webhook", "quotaguard-controller"):
        (container,) = pod_spec(deployment(build, name))["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        args = container["args"]
        assert "reports" in flag_value(args, "--components").split(",")
        assert ports["http"] == int(flag_value(args, "--http-port"))
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_controller_runs_two_replicas_for_leader_election(build: list[Manifest]) -> None:
    controller = deployment(build, "quotaguard-controller")
    assert controller["spec"]["replicas"] == 2
    (args,) = container_args(controller)
    assert flag_value(args, "--components") == "controller,reports"


# ---- command lines --------------------------------------------------------------------------


# The flags of `quotaguard serve` that the CLI contract names (cli.md); the manifests may use
# only these, so that an upgrade which keeps the contract keeps the manifests working.
DOCUMENTED_SERVE_FLAGS = {
    "--policy",
    "--components",
    "--webhook-port",
    "--tls-cert-file",
    "--tls-key-file",
    "--http-port",
    "--kubeconfig",
    "--mode",
}


def parser_flags(verb: str) -> set[str]:
    (verbs,) = (
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    return {flag for action in verbs.choices[verb]._actions for flag in action.option_strings}


def test_the_cli_serves_every_documented_serve_flag() -> None:
    assert parser_flags("serve") >= DOCUMENTED_SERVE_FLAGS


def test_serve_flags_of_the_deployments_are_the_documented_ones(build: list[Manifest]) -> None:
    for name in ("quotaguard-webhook", "quotaguard-controller"):
        (args,) = container_args(deployment(build, name))
        assert args[0] == "serve"
        used = {a.split("=", 1)[0] for a in args if a.startswith("--")}
        assert used, f"{name}: no flags at all"
        assert used <= DOCUMENTED_SERVE_FLAGS, f"{name}: {sorted(used - DOCUMENTED_SERVE_FLAGS)}"


def test_every_container_command_line_parses(build: list[Manifest]) -> None:
    parser = build_parser()
    for workload in workloads(build):
        for args in container_args(workload):
            parsed = parser.parse_args(args)  # exits (SystemExit) on an unknown flag
            assert parsed.verb == args[0]


def test_webhook_serves_the_tls_secret_and_the_policy_it_mounts(build: list[Manifest]) -> None:
    webhook = deployment(build, "quotaguard-webhook")
    spec = pod_spec(webhook)
    (container,) = spec["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    args = container["args"]
    assert flag_value(args, "--tls-cert-file") == f"{mounts['tls']}/tls.crt"
    assert flag_value(args, "--tls-key-file") == f"{mounts['tls']}/tls.key"
    assert flag_value(args, "--policy") == f"{mounts['policy']}/policy.yaml"
    assert volumes["policy"]["configMap"]["name"] == "quotaguard-policy"
    (certs_args,) = container_args(certs_job(build))
    assert volumes["tls"]["secret"]["secretName"] == flag_value(certs_args, "--secret")
    assert flag_value(certs_args, "--namespace") == NS
    port = next(p for p in container["ports"] if p["name"] == "webhook")["containerPort"]
    assert port == int(flag_value(args, "--webhook-port"))


def test_policy_configmap_is_the_repository_policy_and_valid(rendered: list[Manifest]) -> None:
    config_map = one(rendered, "ConfigMap", "quotaguard-policy")
    assert config_map["metadata"]["namespace"] == NS
    text = config_map["data"]["policy.yaml"]
    assert text == (CONFIG / "policy.yaml").read_text()
    policy = load_policy_text(text, "configmap/quotaguard-policy")
    assert policy.name == "gpu-platform"


# ---- admission ------------------------------------------------------------------------------


def operations(hook: Manifest) -> set[str]:
    return {operation for rule in hook["rules"] for operation in rule["operations"]}


def kinds_of(hook: Manifest) -> set[tuple[str, str, str]]:
    return {
        (g, v, r)
        for rule in hook["rules"]
        for g in rule["apiGroups"]
        for v in rule["apiVersions"]
        for r in rule["resources"]
    }


# kubectl's client-side apply keeps the whole applied object in the annotation
# kubectl.kubernetes.io/last-applied-configuration; the API server refuses annotations over
# 262,144 bytes in all, so an object larger than that cannot be installed with `kubectl apply`.
ANNOTATIONS_LIMIT = 262_144


def test_every_object_fits_kubectl_apply(build: list[Manifest]) -> None:
    """`kubectl apply -k config/` (and Argo CD's default client-side sync) works: each object,
    as its last-applied annotation, leaves a tenth of the API server's limit for growth and
    for the certificate a component adds."""
    for doc in build:
        size = len(json.dumps(doc, separators=(",", ":")))
        where = f"{doc['kind']} {doc['metadata']['name']}"
        assert size < ANNOTATIONS_LIMIT * 0.9, f"{where}: {size} bytes"


def test_webhook_configurations_are_safe_for_the_api_server(build: list[Manifest]) -> None:
    seen: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    hooks = list(webhooks(build))
    assert {kind for kind, _ in hooks} == {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    for kind, hook in hooks:
        where = f"{kind} {hook['name']}"
        assert hook["sideEffects"] == "None", where
        assert hook["timeoutSeconds"] <= 10, where
        assert hook["admissionReviewVersions"] == ["v1"], where
        # CREATE and UPDATE never share a webhook: they fail differently.
        (operation,) = operations(hook)
        resources = hook["name"].split(".")[0].endswith("-resources")
        assert hook["name"].split(".")[0].endswith(("-update", "-resources")) == (
            operation == "UPDATE"
        ), where
        conditions = [c["name"] for c in hook["matchConditions"]]
        # An outage blocks new GPU workloads and updates that change a GPU workload's container
        # resources (an undecided GPU change), never Kueue's unsuspend or controllers' updates,
        # which change no container's resources.
        fails_closed = operation == "CREATE" or resources
        assert hook["failurePolicy"] == ("Fail" if fails_closed else "Ignore"), where
        assert ("container-resources-changed" in conditions) == resources, where
        if operation == "UPDATE" and not resources:
            assert hook["timeoutSeconds"] <= 3, where
        expressions = hook["namespaceSelector"]["matchExpressions"]
        assert {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "quotaguard-system"],
        } in expressions, where
        assert {"key": "quotaguard.dev/ignore", "operator": "NotIn", "values": ["true"]} in (
            expressions
        ), where
        path = "/mutate" if kind.startswith("Mutating") else "/validate"
        assert hook["clientConfig"]["service"] == {
            "name": "quotaguard-webhook",
            "namespace": NS,
            "path": path,
            "port": 443,
        }, where
        if kind.startswith("Mutating"):
            assert hook["reinvocationPolicy"] == "IfNeeded", where
        assert hook["matchConditions"], where
        seen.setdefault((kind, "RESOURCES" if resources else operation), set()).update(
            kinds_of(hook)
        )
    pods = ("", "v1", "pods")
    assert seen == {
        ("MutatingWebhookConfiguration", "CREATE"): WEBHOOK_KINDS,
        # and the DRA claim objects, judged before any pod names them
        ("ValidatingWebhookConfiguration", "CREATE"): WEBHOOK_KINDS | CLAIM_KINDS,
        # re-applied manifests get CREATE's classes back; Pods only when they hold a plain GPU
        # next to a class (see test_match_conditions in e2e/)
        ("MutatingWebhookConfiguration", "UPDATE"): WEBHOOK_KINDS,
        # a queue moved by an update stays the tenant's; a Pod's updates are not sent
        ("ValidatingWebhookConfiguration", "UPDATE"): WEBHOOK_KINDS - {pods},
        # a GPU gained or changed by an update is decided, or the update refused
        ("ValidatingWebhookConfiguration", "RESOURCES"): WEBHOOK_KINDS - {pods},
    }


def test_mutating_configuration_is_called_before_kueues(build: list[Manifest]) -> None:
    """The API server calls mutating configurations in name order, and Kueue's webhooks gate a
    Pod or suspend a Job at creation only when quotaguard's queue label is already there
    (docs/deploy.md; e2e/test_kueue_webhooks.py shows a Pod escaping the gate otherwise)."""
    (config,) = find(build, "MutatingWebhookConfiguration")
    name = config["metadata"]["name"]
    assert name == "00-quotaguard-mutating"
    assert name < "kueue-mutating-webhook-configuration"


def test_only_the_mutating_pod_create_webhook_leaves_out_pods_already_decided(
    build: list[Manifest],
) -> None:
    """A Pod that carries quotaguard's decision (a Job's Pod, a bare Pod Kueue gated after
    quotaguard's mutation) is not sent to /mutate again; validation is sent every GPU Pod, and
    every other webhook has its one condition (e2e/test_match_conditions.py evaluates them)."""
    found = {
        (kind, hook["name"]): [condition["name"] for condition in hook["matchConditions"]]
        for kind, hook in webhooks(build)
    }
    pod_mutation = ("MutatingWebhookConfiguration", "pods.mutate.quotaguard.dev")
    assert found.pop(pod_mutation) == [REQUESTS_NVIDIA, NOT_YET_DECIDED]
    pod_validation = ("ValidatingWebhookConfiguration", "pods.validate.quotaguard.dev")
    assert found[pod_validation] == [REQUESTS_NVIDIA]
    # validation of a workload's UPDATE is split by whether container resources change
    for (kind, name), names in list(found.items()):
        split = {
            "-update": "container-resources-unchanged",
            "-resources": "container-resources-changed",
        }
        for suffix, condition in split.items():
            if kind.startswith("Validating") and name.split(".")[0].endswith(suffix):
                assert names[1:] == [condition], name
                found[(kind, name)] = names[:1]
    for plural, _ in CLAIM_RESOURCES:
        claims = ("ValidatingWebhookConfiguration", f"{plural}.validate.quotaguard.dev")
        assert found[claims] == [CLAIM_ASKS_FOR_DEVICES]
    assert [key for key, names in found.items() if len(names) != 1] == []


def test_the_registrations_are_the_ones_the_kind_table_gives() -> None:
    stale = [path for path, text in generated_files().items() if (REPO / path).read_text() != text]
    assert not stale, f"{stale} differ from the kind table: run python webhook/generate.py"


def test_every_kind_has_its_four_webhooks_and_one_condition(build: list[Manifest]) -> None:
    names = {hook["name"] for _, hook in webhooks(build)}
    for kind in KINDS:
        plural = f"{kind.id.lower()}s"
        expected = {
            f"{plural}.mutate.quotaguard.dev",
            f"{plural}.validate.quotaguard.dev",
            f"{plural}-update.mutate.quotaguard.dev",
        }
        if kind.id != "Pod":
            expected.add(f"{plural}-update.validate.quotaguard.dev")
            expected.add(f"{plural}-resources.validate.quotaguard.dev")
        assert expected <= names, kind.id


def test_webhook_service_reaches_the_webhook_pods(build: list[Manifest]) -> None:
    service = one(build, "Service", "quotaguard-webhook")
    assert service["metadata"]["namespace"] == NS
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (443, 8443)
    pod_labels = deployment(build, "quotaguard-webhook")["spec"]["template"]["metadata"]["labels"]
    assert labels_match(service["spec"]["selector"], pod_labels)
    controller_labels = deployment(build, "quotaguard-controller")["spec"]["template"]["metadata"][
        "labels"
    ]
    assert not labels_match(service["spec"]["selector"], controller_labels)


def test_default_build_needs_no_custom_resource_definitions(rendered: list[Manifest]) -> None:
    groups = {d["apiVersion"].rpartition("/")[0] for d in rendered}
    assert groups <= BUILT_IN_GROUPS, sorted(groups - BUILT_IN_GROUPS)


# ---- components -----------------------------------------------------------------------------


def test_cert_manager_replaces_the_certs_job_and_injects_the_ca(
    with_cert_manager: list[Manifest],
) -> None:
    docs = with_cert_manager
    assert not [d for d in docs if d["metadata"]["name"].startswith("quotaguard-certs")]
    serving = one(docs, "Certificate", "quotaguard-webhook")
    volume = next(
        v for v in pod_spec(deployment(docs, "quotaguard-webhook"))["volumes"] if v["name"] == "tls"
    )
    assert serving["spec"]["secretName"] == volume["secret"]["secretName"]
    assert set(serving["spec"]["dnsNames"]) == set(service_dns_names("quotaguard-webhook", NS))
    assert "server auth" in serving["spec"]["usages"]
    issuer = one(docs, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca = one(docs, "Certificate", "quotaguard-ca")
    assert (
        ca["spec"]["isCA"] is True
        and issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    )
    for configuration in docs:
        if configuration["kind"].endswith("WebhookConfiguration"):
            annotations = configuration["metadata"]["annotations"]
            assert annotations["cert-manager.io/inject-ca-from"] == f"{NS}/quotaguard-webhook"


@pytest.mark.parametrize("tool", TOOLS)
def test_pilot_limits_the_webhooks_to_labelled_namespaces_and_recommends(
    renders: Renders, tool: str
) -> None:
    docs = renders(tool, ["pilot"])
    hooks = list(webhooks(docs))
    # CREATE: mutating and validating for each kind; UPDATE: the same but no Pod validation,
    # validation split by whether resources change; CREATE of the DRA claim objects
    assert len(hooks) == 5 * len(KINDS) - 2 + len(CLAIM_RESOURCES)
    for _, hook in hooks:
        assert hook["failurePolicy"] == "Ignore"
        selector = hook["namespaceSelector"]
        assert selector["matchLabels"] == {"quotaguard.dev/pilot": "true"}
        assert len(selector["matchExpressions"]) == 2  # the exemptions still hold
        assert hook["matchConditions"]
    (args,) = container_args(deployment(docs, "quotaguard-controller"))
    assert args[-2:] == ["--mode", "recommend"]
    build_parser().parse_args(args)


@pytest.mark.parametrize("tool", TOOLS)
def test_manage_queues_adds_create_on_queues_only(renders: Renders, tool: str) -> None:
    base = grants(one(renders(tool, []), "ClusterRole", "quotaguard-controller"))
    docs = renders(tool, ["manage-queues"])
    added = grants(one(docs, "ClusterRole", "quotaguard-controller")) - base
    assert added == {
        ("kueue.x-k8s.io", "clusterqueues", "create"),
        ("scheduling.volcano.sh", "queues", "create"),
    }


@pytest.mark.parametrize("tool", TOOLS)
def test_gpu_operator_configs_grant_reading_one_configmap_in_the_operators_namespace(
    renders: Renders, tool: str
) -> None:
    base = renders(tool, [])
    assert not [d for d in base if d["metadata"]["name"] == "quotaguard-controller-mig-configs"]
    docs = renders(tool, ["gpu-operator-configs"])
    role = one(docs, "Role", "quotaguard-controller-mig-configs")
    assert role["metadata"]["namespace"] == "gpu-operator"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["default-mig-parted-config"],
            "verbs": ["get"],
        }
    ]
    binding = one(docs, "RoleBinding", "quotaguard-controller-mig-configs")
    assert binding["metadata"]["namespace"] == "gpu-operator"
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "quotaguard-controller",
            "namespace": "quotaguard-system",
        }
    ]
    (args,) = container_args(deployment(docs, "quotaguard-controller"))
    if tool == "helm":
        assert args[args.index("--gpu-operator-namespace") + 1] == "gpu-operator"
    build_parser().parse_args(args)


@pytest.mark.parametrize("tool", TOOLS)
def test_prometheus_scrapes_both_deployments_on_their_http_port(
    renders: Renders, tool: str
) -> None:
    docs = renders(tool, ["prometheus"])
    monitor = one(docs, "PodMonitor", "quotaguard")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    requirements = monitor["spec"]["selector"]["matchExpressions"]
    for name in ("quotaguard-webhook", "quotaguard-controller"):
        template = deployment(docs, name)["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert all(labels.get(r["key"]) in r["values"] for r in requirements), name
        (container,) = template["spec"]["containers"]
        assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert endpoint["path"] == "/metrics"
    # The alerts and the Grafana dashboard come with it, the same in both builds.
    (rule_file,) = load_yaml(CONFIG / "components" / "prometheus" / "prometheusrule.yaml")
    assert one(docs, "PrometheusRule", "quotaguard")["spec"] == rule_file["spec"]
    dashboard = one(docs, "ConfigMap", "quotaguard-dashboard")
    assert dashboard["metadata"]["namespace"] == NS
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (CONFIG / "components" / "prometheus" / "dashboards" / "quotaguard.json").read_text()
    assert dashboard["data"]["quotaguard.json"].strip() == shipped.strip()


# ---- samples --------------------------------------------------------------------------------


def sample(backend: str) -> list[Manifest]:
    if KUBECTL is not None:
        return kustomize(CONFIG / "samples" / backend)
    return [
        d
        for p in sorted((CONFIG / "samples" / backend).glob("*.yaml"))
        if p.name != "kustomization.yaml"
        for d in load_yaml(p)
    ]


@pytest.mark.parametrize(
    ("policy_file", "samples"),
    [
        (CONFIG / "policy.yaml", "kueue"),
        # two GPU models on nvidia.com/gpu, `to: [h100, a100]`
        (CONFIG / "samples" / "kueue" / "gpu-models" / "policy.yaml", "kueue/gpu-models"),
    ],
)
def test_kueue_samples_follow_the_policy(policy_file: Path, samples: str) -> None:
    policy = load_policy_file(policy_file)
    docs = sample(samples)
    flavors = {d["metadata"]["name"]: d["spec"] for d in find(docs, "ResourceFlavor")}
    for gpu_class in policy.spec.gpu_classes:
        assert flavors[gpu_class.flavor].get("nodeLabels", {}) == gpu_class.node_selector
    class_resources = list(dict.fromkeys(c.resource for c in policy.spec.gpu_classes))
    for tenant in policy.spec.tenants:
        queue = one(docs, "ClusterQueue", tenant.queue)["spec"]
        assert queue["cohortName"] == policy.cohort
        groups = queue["resourceGroups"]
        gpu_group = next(g for g in groups if "nvidia.com/gpu" in g["coveredResources"])
        assert gpu_group["coveredResources"] == class_resources
        # Kueue tries the flavors in this order: the tenant's rewrite lists' order first
        assert [f["name"] for f in gpu_group["flavors"]] == list(flavor_order(policy, tenant))
        if tenant.flavor_fungibility is not None:
            wanted_fungibility = flavor_fungibility({}, tenant.flavor_fungibility, "x/v1beta2")
            assert queue["flavorFungibility"] == wanted_fungibility
        for group in groups:  # Kueue: every flavor lists every covered resource, in order
            for flavor in group["flavors"]:
                assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
        for gpu_class in policy.spec.gpu_classes:
            flavor = next(f for f in gpu_group["flavors"] if f["name"] == gpu_class.flavor)
            quota = next(r for r in flavor["resources"] if r["name"] == gpu_class.resource)
            wanted = tenant.quota.get(gpu_class.name)
            if wanted is None:
                assert (quota["nominalQuota"], quota["borrowingLimit"]) == (0, 0)
            else:
                assert quota["nominalQuota"] == wanted.guaranteed
                if wanted.max is not None:
                    assert quota["borrowingLimit"] == wanted.max - wanted.guaranteed
    local_queues = find(docs, "LocalQueue")
    namespaces = {d["metadata"]["name"] for d in find(docs, "Namespace")}
    for queue in local_queues:
        tenant = policy.tenant_of(queue["metadata"]["namespace"])
        assert tenant is not None
        assert queue["metadata"]["name"] == tenant.local_queue
        assert queue["spec"]["clusterQueue"] == tenant.queue
        assert queue["metadata"]["namespace"] in namespaces
    assert {q["metadata"]["namespace"] for q in local_queues} == {
        ns for t in policy.spec.tenants for ns in t.namespaces if "*" not in ns
    }


def test_volcano_samples_follow_the_policy() -> None:
    policy = load_policy_file(CONFIG / "policy.yaml")
    docs = sample("volcano")
    one(docs, "Queue", policy.cohort)
    for tenant in policy.spec.tenants:
        queue = one(docs, "Queue", tenant.queue)["spec"]
        assert queue["parent"] == policy.cohort
        assert queue["weight"] == tenant.weight
        for class_name, quota in tenant.quota.items():
            resource = policy.classes_by_name[class_name].resource
            assert queue["guarantee"]["resource"][resource] == str(quota.guaranteed)
            if quota.max is not None:
                assert queue["capability"][resource] == str(quota.max)


def test_samples_are_not_in_the_default_build(build: list[Manifest]) -> None:
    assert not [d for d in build if "kueue" in d["apiVersion"] or "volcano" in d["apiVersion"]]


@pytest.mark.parametrize("tool", ["kustomize", "helm"])
def test_the_network_policy_lets_only_its_sources_reach_the_webhook_port(
    renders: Renders, tool: str
) -> None:
    docs = renders(tool, ["network-policy"])
    policy = one(docs, "NetworkPolicy", "quotaguard-webhook")
    webhook = deployment(docs, "quotaguard-webhook")
    labels = webhook["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    webhook_rule, http_rule = policy["spec"]["ingress"]
    assert webhook_rule["ports"] == [{"port": "webhook", "protocol": "TCP"}]
    assert webhook_rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert http_rule == {"ports": [{"port": "http", "protocol": "TCP"}]}  # from anywhere
    ports = {p["name"] for c in pod_spec(webhook)["containers"] for p in c.get("ports", [])}
    assert {"webhook", "http"} <= ports


@pytest.mark.parametrize("tool", TOOLS)
def test_dra_lets_the_webhook_read_only_what_claims_name(renders: Renders, tool: str) -> None:
    """Without the component the webhook has no API access (test_webhook_has_no_api_access);
    with it, a token, the flag, and reads of the DRA objects a pod's claims name."""
    docs = renders(tool, ["dra"])
    role = one(docs, "ClusterRole", "quotaguard-webhook-dra")
    assert grants(role) == {
        ("resource.k8s.io", "resourceclaimtemplates", "get"),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "deviceclasses", "list"),
    }
    binding = one(docs, "ClusterRoleBinding", "quotaguard-webhook-dra")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "quotaguard-webhook", "namespace": NS}
    ]
    spec = pod_spec(deployment(docs, "quotaguard-webhook"))
    assert spec["automountServiceAccountToken"] is True
    assert spec["containers"][0]["args"][-1] == "--webhook-read-dra"
    base = pod_spec(deployment(renders(tool, []), "quotaguard-webhook"))
    assert "--webhook-read-dra" not in base["containers"][0]["args"]


@pytest.mark.parametrize("tool", TOOLS)
def test_kueue_config_turns_kueues_dra_on_and_lets_the_controller_read_its_mappings(
    renders: Renders, tool: str
) -> None:
    docs = renders(tool, ["kueue-config"])
    configmap = one(docs, "ConfigMap", "kueue-manager-config")
    assert configmap["metadata"]["namespace"] == "kueue-system"
    text = configmap["data"]["controller_manager_config.yaml"]
    assert yaml.safe_load(text)["featureGates"] == {"DynamicResourceAllocation": True}
    assert device_class_mappings(text) == ({"gpu.nvidia.com": "nvidia.com/gpu"}, [])
    role = one(docs, "Role", "quotaguard-controller-kueue-config")
    assert role["metadata"]["namespace"] == "kueue-system"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["kueue-manager-config"],
            "verbs": ["get"],
        }
    ]
    dra = renders(tool, ["dra"])
    assert grants(one(dra, "ClusterRole", "quotaguard-controller-dra")) == {
        ("resource.k8s.io", resource, verb)
        for resource in (
            "resourceslices",
            "deviceclasses",
            "resourceclaims",
            "resourceclaimtemplates",
            "devicetaintrules",
        )
        for verb in ("list", "watch")
    }
