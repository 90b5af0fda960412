"""The PrometheusRule alerts: valid rules (`promtool check rules`) that fire on the cases they
exist for and stay silent on healthy ones (`promtool test rules`, tests/deploy/promtool/), with
promtool built from the Prometheus module by `python -m e2e.build`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.build import Layout, cache_dir
from tests.deploy.manifests import CONFIG, helm_template, load_yaml, one

RULE_FILE = CONFIG / "components" / "prometheus" / "prometheusrule.yaml"
TESTS = Path(__file__).resolve().parent / "promtool" / "alerts-test.yaml"
ALERTS = {
    "QuotaguardCertificateExpiresSoon",
    "QuotaguardCertificateExpiresVerySoon",
    "QuotaguardPolicyReloadFailing",
    "QuotaguardWebhookErrors",
    "QuotaguardWebhookSlow",
    "QuotaguardNoControllerLeader",
    "QuotaguardPlanStale",
    "QuotaguardQueueWritesFailing",
    "QuotaguardQueueMissing",
    "QuotaguardGuaranteesAboveCapacity",
    "QuotaguardGPUsIdleWhileWorkloadsWait",
    "QuotaguardResourceNameNotSent",
}


def promtool() -> Path:
    found = Layout(cache_dir()).binary("promtool")
    if found.exists():
        return found
    message = "promtool not built: run `python -m e2e.build` (it builds the Prometheus module)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message}; CI must test the alert rules, not skip them")
    pytest.skip(message)


def rule_groups() -> dict[str, object]:
    (rule,) = load_yaml(RULE_FILE)
    spec: dict[str, object] = rule["spec"]
    return spec


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(), sort_keys=False))
    shutil.copyfile(TESTS, tmp_path / TESTS.name)
    return tmp_path


def run(tool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool), *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def test_rules_are_valid(rules_dir: Path) -> None:
    result = run(promtool(), "check", "rules", "rules.yaml", cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_on_its_case_and_not_on_the_healthy_one(rules_dir: Path) -> None:
    result = run(promtool(), "test", "rules", TESTS.name, cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_case_and_a_severity() -> None:
    alerts = [r for g in rule_groups()["groups"] for r in g["rules"]]  # type: ignore[attr-defined]
    assert {a["alert"] for a in alerts} == ALERTS
    assert all(a["labels"]["severity"] in ("info", "warning", "critical") for a in alerts)
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    firing = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check["exp_alerts"]
    }
    assert firing == ALERTS


def test_chart_ships_the_same_rules() -> None:
    docs = helm_template("prometheus.enabled=true")
    chart_rule = one(docs, "PrometheusRule", "quotaguard")
    assert chart_rule["spec"] == rule_groups()


RUNBOOKS = CONFIG.parent / "docs" / "troubleshooting.md"
RUNBOOK_BASE = "https://github.com/quotaguard/quotaguard/blob/main/docs/troubleshooting.md"


def runbook_sections() -> dict[str, str]:
    """Each `## ` section of docs/troubleshooting.md by its anchor (GitHub's slug)."""
    sections: dict[str, str] = {}
    for block in RUNBOOKS.read_text().split("\n## ")[1:]:
        heading, _, body = block.partition("\n")
        slug = re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")
        sections[slug] = body
    return sections


def test_every_alert_links_its_section_of_the_troubleshooting_page() -> None:
    sections = runbook_sections()
    for group in rule_groups()["groups"]:  # type: ignore[attr-defined]
        for rule in group["rules"]:
            anchor = rule["alert"].lower()
            assert rule["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#{anchor}"
            body = sections.get(anchor)
            assert body is not None, f"docs/troubleshooting.md has no section {rule['alert']}"
            for part in ("**What it means.**", "**Check.**", "**Fix.**"):
                assert part in body, f"{rule['alert']}: no {part}"


def test_the_chart_default_runbook_base_is_the_rule_files() -> None:
    (values,) = load_yaml(CONFIG.parent / "charts" / "quotaguard" / "values.yaml")
    assert values["prometheus"]["runbookBaseURL"] == RUNBOOK_BASE
