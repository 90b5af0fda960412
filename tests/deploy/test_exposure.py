"""What stands between a tenant and the ways around quotaguard, in both builds: the policy that
keeps quotaguard.dev/ignore for the identities it names, the NetworkPolicy that refuses to
render open, and the access checks of /metrics and /reports (scraped with a token)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from quotaguard.webhook.registrations import IGNORE_LABEL
from tests.deploy.manifests import (
    CHART,
    CONFIG,
    KUBECTL,
    REPO,
    WEBHOOK,
    Manifest,
    Renders,
    find,
    helm_template,
    kustomize,
    load_yaml,
    one,
    pod_spec,
    run_helm,
)

TOOLS = ["kustomize", "helm"]
POLICY = "quotaguard-ignore-label"


def variables(policy: Manifest) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


# ---- the guard of quotaguard.dev/ignore ------------------------------------------------------


@pytest.mark.parametrize("tool", TOOLS)
def test_both_builds_guard_the_ignore_label_on_every_namespace_write(
    renders: Renders, tool: str
) -> None:
    docs = renders(tool, [])
    policy = one(docs, "ValidatingAdmissionPolicy", POLICY)
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [""]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    assert "namespaces" in rule["resources"]
    assert "namespaceSelector" not in policy["spec"]["matchConstraints"]  # kube-system too
    names = variables(policy)
    # docs/deploy.md's overlay patches them by position
    assert [v["name"] for v in policy["spec"]["variables"][:2]] == ["allowedUsers", "allowedGroups"]
    assert names["allowedGroups"] == "['system:masters']" or names["allowedGroups"] == (
        '["system:masters"]'
    )
    assert names["allowedUsers"] == "[]"
    assert all(IGNORE_LABEL in names[side] for side in ("before", "after"))
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"] == "variables.before == variables.after || variables.allowed"
    binding = one(docs, "ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"]["policyName"] == POLICY
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "paramRef" not in binding["spec"]


def test_the_documented_overlay_patch_sets_the_allow_list(tmp_path: Path) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl not installed (kustomize)")
    guide = (REPO / "docs" / "deploy.md").read_text()
    section = guide[guide.index("With kustomize, patch the variables") :]
    patch = section[section.index("```yaml\n") + 8 : section.index("```\n", 10)]
    base = os.path.relpath(CONFIG, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {base}\n{patch}"
    )
    names = variables(one(kustomize(tmp_path), "ValidatingAdmissionPolicy", POLICY))
    assert names["allowedUsers"] == (
        "['system:serviceaccount:argocd:argocd-application-controller']"
    )
    assert names["allowedGroups"] == "['system:masters', 'platform-admins']"


def test_the_chart_guard_is_the_one_of_webhook_dir_with_the_values_allow_list() -> None:
    (source,) = load_yaml(WEBHOOK / "ignore-label-policy.yaml")
    docs = helm_template(
        "ignoreLabelGuard.allowedUsers={system:serviceaccount:argocd:argocd-application-controller}",
        "ignoreLabelGuard.allowedGroups={platform-admins,system:masters}",
    )
    rendered = one(docs, "ValidatingAdmissionPolicy", POLICY)
    names = variables(rendered)
    assert names["allowedUsers"] == (
        '["system:serviceaccount:argocd:argocd-application-controller"]'
    )
    assert names["allowedGroups"] == '["platform-admins","system:masters"]'
    others = {k: v for k, v in names.items() if not k.startswith("allowed")}
    assert others == {k: v for k, v in variables(source).items() if not k.startswith("allowed")}
    assert rendered["spec"]["validations"] == source["spec"]["validations"]
    assert rendered["spec"]["matchConstraints"] == source["spec"]["matchConstraints"]


def test_the_chart_allow_list_is_quoted_for_cel_whatever_the_names() -> None:
    docs = helm_template("ignoreLabelGuard.allowedUsers={o'brien\\,x}")
    users = variables(one(docs, "ValidatingAdmissionPolicy", POLICY))["allowedUsers"]
    assert users == '["o\'brien,x"]'  # a JSON string list: a CEL list literal


def test_the_guard_can_be_left_out_of_the_chart() -> None:
    docs = helm_template("ignoreLabelGuard.enabled=false")
    assert not find(docs, "ValidatingAdmissionPolicy")
    assert not find(docs, "ValidatingAdmissionPolicyBinding")


# ---- the NetworkPolicy ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        ["networkPolicy.enabled=true"],
        ["networkPolicy.enabled=true", "networkPolicy.apiServerCIDRs=null"],
    ],
)
def test_an_enabled_network_policy_without_addresses_is_refused(values: list[str]) -> None:
    """An ingress rule with an empty `from` lets every pod in: the chart renders nothing."""
    argv = ["template", "q", str(CHART)]
    for value in values:
        argv += ["--set", value]
    result = run_helm(*argv)
    assert result.returncode != 0
    assert "apiServerCIDRs" in result.stderr


def test_the_template_itself_refuses_without_the_schema() -> None:
    result = run_helm(
        "template",
        "q",
        str(CHART),
        "--skip-schema-validation",
        "--set",
        "networkPolicy.enabled=true",
    )
    assert result.returncode != 0
    assert "an empty list would let every pod reach the webhook" in result.stderr


def test_network_policy_addresses_must_be_cidrs() -> None:
    result = run_helm(
        "template",
        "q",
        str(CHART),
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.apiServerCIDRs={everyone}",
    )
    assert result.returncode != 0
    assert "apiServerCIDRs" in result.stderr


@pytest.mark.parametrize("tool", TOOLS)
def test_every_ingress_rule_to_the_webhook_port_names_its_sources(
    renders: Renders, tool: str
) -> None:
    policy = one(renders(tool, ["network-policy"]), "NetworkPolicy", "quotaguard-webhook")
    for rule in policy["spec"]["ingress"]:
        if any(p["port"] == "webhook" for p in rule["ports"]):
            assert rule.get("from"), rule


# ---- /metrics and /reports ------------------------------------------------------------------


def reader_accounts(docs: list[Manifest]) -> set[str]:
    return {
        s["name"]
        for d in docs
        if d.get("kind") == "ClusterRoleBinding"
        and d["roleRef"]["name"] == "quotaguard-reports-reader"
        for s in d["subjects"]
        if s["kind"] == "ServiceAccount"
    }


@pytest.mark.parametrize("tool", TOOLS)
def test_prometheus_scrapes_with_the_token_of_an_account_that_may_read_metrics(
    renders: Renders, tool: str
) -> None:
    docs = renders(tool, ["prometheus"])
    (endpoint,) = one(docs, "PodMonitor", "quotaguard")["spec"]["podMetricsEndpoints"]
    credentials = endpoint["authorization"]["credentials"]
    assert endpoint["authorization"]["type"] == "Bearer"
    secret = one(docs, "Secret", credentials["name"])
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert credentials["key"] == "token"
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    one(docs, "ServiceAccount", account)
    assert account in reader_accounts(docs)
    reader = one(docs, "ClusterRole", "quotaguard-reports-reader")
    assert reader["rules"] == [
        {
            "nonResourceURLs": [
                "/metrics",
                "/reports",
                "/reports/",
                "/reports/quota",
                "/reports/quota.csv",
                "/reports/showback.csv",
            ],
            "verbs": ["get"],
        }
    ]


@pytest.mark.parametrize("tool", TOOLS)
def test_no_one_reads_the_reports_by_default(renders: Renders, tool: str) -> None:
    assert reader_accounts(renders(tool, [])) == set()


def serve_args(docs: list[Manifest]) -> dict[str, list[str]]:
    args: dict[str, Any] = {}
    for d in docs:
        if d.get("kind") == "Deployment":
            (container,) = pod_spec(d)["containers"]
            args[d["metadata"]["name"]] = container["args"]
    return args


def test_the_chart_opts_out_only_when_asked() -> None:
    for args in serve_args(helm_template()).values():
        assert "--reports-auth" not in args  # the default: kubernetes
    docs = helm_template("reports.auth=none", "prometheus.enabled=true")
    for args in serve_args(docs).values():
        assert args[args.index("--reports-auth") + 1] == "none"
    assert not find(docs, "ClusterRole", "quotaguard-access-review")
    assert not find(docs, "Secret", "quotaguard-metrics-reader-token")
    (endpoint,) = one(docs, "PodMonitor", "quotaguard")["spec"]["podMetricsEndpoints"]
    assert "authorization" not in endpoint
    webhook = one(docs, "Deployment", "quotaguard-webhook")
    # the token stays: the webhook reads the TrainJob runtimes with it
    assert pod_spec(webhook)["automountServiceAccountToken"] is True
