"""The Grafana dashboard and the alert rules against a real Prometheus (built from its Go
module by `python -m e2e.build`) scraping a real quotaguard: the webhook answering the API
server and the controller planning the Kueue sample queues. Every query of every panel and
variable returns series, and every alert rule evaluates without error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e import conftest
from e2e.build import Toolchain
from e2e.cluster import REPO_ROOT, gpu_pod, wait_until
from e2e.kueue import add_gpu_nodes, apply_kueue_samples, serve_controller, write_policy
from e2e.prometheus import Prometheus, start_prometheus

PROMETHEUS_DIR = REPO_ROOT / "config" / "components" / "prometheus"
DASHBOARD = PROMETHEUS_DIR / "dashboards" / "quotaguard.json"
RULES = PROMETHEUS_DIR / "prometheusrule.yaml"
SERVING = "serving-dashboard-e2e"  # tenant inference
NO_TENANT = "no-tenant-dashboard-e2e"  # unmatchedNamespaces: deny


@pytest.fixture(scope="module")
def prometheus(
    toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    cluster = conftest._start(toolchain, controllers=False)
    work = tmp_path_factory.mktemp("prometheus")
    try:
        add_gpu_nodes(cluster)
        apply_kueue_samples(cluster)
        policy = write_policy(work, mode="recommend")
        controller = serve_controller(
            cluster, policy, pod_name="dashboard-controller", lease_namespace="lease-dashboard"
        )
        webhook = cluster.serve_quotaguard(
            policy, components="webhook,reports", name="dashboard-webhook"
        )
        for name in (SERVING, NO_TENANT):
            cluster.create_namespace(name)
        # Traffic: one pod rewritten, one denied (no tenant owns the namespace).
        cluster.create(gpu_pod("rewritten", SERVING))
        assert cluster.create(gpu_pod("denied", NO_TENANT), check=False).returncode != 0
        rules = work / "rules.yaml"
        (rule,) = [d for d in yaml.safe_load_all(RULES.read_text()) if d]
        rules.write_text(yaml.safe_dump(rule["spec"]))
        server = start_prometheus(
            cluster,
            work,
            [
                {
                    "job_name": "quotaguard",
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{webhook.http_port}"],
                            "labels": {"pod": "quotaguard-webhook-0"},
                        },
                        {
                            "targets": [f"127.0.0.1:{controller.http_port}"],
                            "labels": {"pod": "quotaguard-controller-0"},
                        },
                    ],
                }
            ],
            rule_files=[rules],
        )

        def both_scraped_twice() -> bool:
            try:
                up = server.query("count_over_time(up[1m]) >= 3 and up == 1")
            except OSError:
                return False
            return len(up) == 2

        wait_until(both_scraped_twice, timeout=60, interval=0.5, what="two targets scraped")
        # The controller plans every second; give the quota series a few scrapes.
        wait_until(
            lambda: server.query("count_over_time(quotaguard_quota_nominal[1m]) >= 3"),
            timeout=60,
            interval=0.5,
            what="quota series scraped",
        )
        yield server
    finally:
        conftest._finish(cluster)


# Series that exist only with GPU telemetry (--prometheus-url), a faulty GPU, a geometry pool or
# the showback reports. This cluster has none of them: their queries must be valid PromQL that
# Prometheus evaluates, but may return nothing (the unit tests check that quotaguard exports
# them under these names).
ONLY_WITH_TELEMETRY_FAULTS_LAYOUTS_OR_SHOWBACK = (
    "quotaguard_quota_used_gpus",
    "quotaguard_quota_idle_gpus",
    "quotaguard_class_faulty_gpu",
    "quotaguard_telemetry_",
    "quotaguard_layout_",
    "quotaguard_showback_",
)


def conditional(expr: str) -> bool:
    return any(name in expr for name in ONLY_WITH_TELEMETRY_FAULTS_LAYOUTS_OR_SHOWBACK)


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def as_grafana_sends(expr: str) -> str:
    """The query as Grafana sends it with "All" selected and a 1 s scrape interval."""
    return (
        expr.replace('"$tenant"', '".*"')
        .replace('"$class"', '".*"')
        .replace("$__rate_interval", "1m")
    )


def test_every_dashboard_query_returns_series(prometheus: Prometheus) -> None:
    """Every query is evaluated (a malformed one is an HTTP 400 here); each one that does not
    need telemetry, faults, layouts or showback returns series."""
    empty = [
        f"{title}: {expr}"
        for title, expr in dashboard_queries()
        if not prometheus.query(as_grafana_sends(expr)) and not conditional(expr)
    ]
    assert not empty, "queries without series:\n" + "\n".join(empty)
    assert [e for _, e in dashboard_queries() if not conditional(e)]


def test_variables_list_the_tenants_and_classes(prometheus: Prometheus) -> None:
    board = json.loads(DASHBOARD.read_text())
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        metric, label = (
            variable["query"]["query"].removeprefix("label_values(").removesuffix(")").split(", ")
        )
        values = prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert values, variable["name"]
    tenants = prometheus.get(
        "/api/v1/label/tenant/values", **{"match[]": "quotaguard_quota_nominal"}
    )
    assert set(tenants) == {"inference", "training", "notebooks"}


def test_denials_and_rewrites_are_counted_by_the_webhook(prometheus: Prometheus) -> None:
    denied = prometheus.query("quotaguard_admission_denials_total")
    # Prometheus drops an empty label: no tenant owns the namespace.
    assert [(d["metric"].get("tenant", ""), d["metric"]["reason"]) for d in denied] == [
        ("", "unmatched-namespace")
    ]
    mutated = prometheus.query('quotaguard_admission_requests_total{result="mutated"}')
    assert mutated and float(mutated[0]["value"][1]) >= 1


def test_every_alert_rule_evaluates_against_the_real_series(prometheus: Prometheus) -> None:
    def evaluated() -> list[Any] | None:
        groups = prometheus.get("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return (
            rules
            if rules and all(r.get("lastEvaluation", "").startswith("2") for r in rules)
            else None
        )

    rules = wait_until(evaluated, timeout=30, interval=0.5, what="rules evaluated")
    shipped = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    assert {r["name"] for r in rules} == {r["alert"] for g in shipped for r in g["rules"]}
    broken = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
    assert not broken, broken
    # A healthy quotaguard raises nothing but what a fresh install expects.
    firing = {r["name"] for r in rules if r["state"] == "firing"}
    assert firing <= {"QuotaguardGPUsIdleWhileWorkloadsWait"}, firing
