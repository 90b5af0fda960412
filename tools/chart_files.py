"""The Helm chart's own copies of files kept elsewhere in the repository.

    python -m tools.chart_files            # refresh the copies
    python -m tools.chart_files --check    # exit 1, naming them, when a copy differs

A chart is installed from wherever it is copied to (`helm package`, a chart repository, a
vendored directory), so charts/quotaguard holds real files, never links out of itself. The
repository keeps one source of each: the webhook configurations (written by
webhook/generate.py from the kind table), the alert rules and dashboard of the prometheus
component, the sample policy and the GPU scheduler profile. tests/deploy checks that each
copy is its source.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHART_FILES = ROOT / "charts" / "quotaguard" / "files"

# chart file (under files/) -> its source in the repository
COPIES: dict[str, str] = {
    "webhook/mutatingwebhookconfiguration.yaml": "webhook/mutatingwebhookconfiguration.yaml",
    "webhook/validatingwebhookconfiguration.yaml": "webhook/validatingwebhookconfiguration.yaml",
    "webhook/validatingwebhookconfiguration-resources.yaml": (
        "webhook/validatingwebhookconfiguration-resources.yaml"
    ),
    "webhook/ignore-label-policy.yaml": "webhook/ignore-label-policy.yaml",
    "webhook/ignore-label-policy-binding.yaml": "webhook/ignore-label-policy-binding.yaml",
    "prometheus/prometheusrule.yaml": "config/components/prometheus/prometheusrule.yaml",
    "prometheus/dashboards/quotaguard.json": (
        "config/components/prometheus/dashboards/quotaguard.json"
    ),
    "kueue/controller_manager_config.yaml": (
        "config/components/kueue-config/controller_manager_config.yaml"
    ),
    "policy.yaml": "config/policy.yaml",
    "scheduler/scheduler-config.yaml": "config/components/scheduler-profile/scheduler-config.yaml",
}


def stale() -> list[str]:
    """The chart files (relative to the repository) that are not their source byte for byte."""
    found = []
    for chart_file, source in COPIES.items():
        target = CHART_FILES / chart_file
        real = target.is_file() and not target.is_symlink()
        if not real or target.read_bytes() != (ROOT / source).read_bytes():
            found.append(str(target.relative_to(ROOT)))
    return found


def refresh() -> list[str]:
    """Write every copy that differs from its source; the chart files written."""
    written = []
    for chart_file, source in COPIES.items():
        target = CHART_FILES / chart_file
        data = (ROOT / source).read_bytes()
        if target.is_symlink():
            target.unlink()
        elif target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append(str(target.relative_to(ROOT)))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chart_files", allow_abbrev=False)
    parser.add_argument("--check", action="store_true", help="only report stale copies")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for path in found:
            print(f"{path} differs from its source: run python -m tools.chart_files")
        return 1 if found else 0
    for path in refresh():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
