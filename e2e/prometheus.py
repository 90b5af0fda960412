"""A real Prometheus server (built from its Go module by `python -m e2e.build`) on 127.0.0.1,
started as one of the cluster's processes, and a small client of its HTTP API."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.build import Layout, cache_dir
from e2e.cluster import Cluster, Process, free_port, wait_until


def prometheus_binary() -> Path:
    """The built binary; skip without it (fail under CI, which must run these tests)."""
    found = Layout(cache_dir()).binary("prometheus")
    if found.exists():
        return found
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("prometheus not built by `python -m e2e.build`; CI must run this test")
    pytest.skip("prometheus not built: run `python -m e2e.build`")


@dataclass
class Prometheus:
    url: str
    argv: list[str] = field(default_factory=list)
    process: Process | None = None

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[Any]:
        result: list[Any] = self.get("/api/v1/query", query=expr)["result"]
        return result

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def start_prometheus(
    cluster: Cluster,
    work: Path,
    scrape_configs: Sequence[Mapping[str, Any]],
    *,
    rule_files: Sequence[Path] = (),
    interval: str = "1s",
    name: str = "prometheus",
) -> Prometheus:
    """Prometheus scraping `scrape_configs` every `interval`, its TSDB under `work`; returns
    once it answers /-/ready. Its log joins the cluster's failure report."""
    binary = prometheus_binary()
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(f) for f in rule_files],
        "scrape_configs": [dict(c) for c in scrape_configs],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [
        str(binary),
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    server = Prometheus(f"http://127.0.0.1:{port}", argv)
    restart_prometheus(cluster, server, name=name)
    return server


def restart_prometheus(cluster: Cluster, server: Prometheus, *, name: str = "prometheus") -> None:
    """Start it (again, on the same port and TSDB) and wait until it is ready."""
    server.process = cluster.start_process(name, server.argv)
    process = server.process

    def ready() -> bool:
        process.check_alive()
        return server.ready()

    wait_until(ready, timeout=60, interval=0.3, what=f"{name} ready")
