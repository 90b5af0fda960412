"""The webhook over HTTPS: latency and throughput as the API server would see them.

    python bench/bench_webhook.py [--requests 4000] [--concurrency 50]

Prints (1) the in-process cost of one answer (JSON decode + engine + JSON encode, what the
`quotaguard_admission_duration_seconds` histogram measures) and (2) requests/s and latency
percentiles through a real TLS server (its own process, one core) on 127.0.0.1 with keep-alive
connections. Targets: in-process p50 < 1 ms; over HTTPS >= 1,000 requests/s, p99 < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import ssl
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import trustme
from aiohttp import web

from quotaguard.admission import engine
from quotaguard.admission.reviews import make_review
from quotaguard.policystore import PolicyStore
from quotaguard.tlsreload import ReloadingCertificate
from quotaguard.webhook.server import answer, build_webhook_app

ROOT = Path(__file__).resolve().parents[1]
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "trainer-0",
        "labels": {f"app.kubernetes.io/label-{i}": "value" for i in range(8)},
        "annotations": {"quotaguard.dev/gpu-memory": "8Gi"},
    },
    "spec": {
        "containers": [
            {
                "name": f"c{i}",
                "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "env": [{"name": f"E{j}", "value": "x" * 40} for j in range(15)],
                "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}},
            }
            for i in range(2)
        ]
    },
}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def in_process(store: PolicyStore, body: bytes, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        answer(store, engine.review, "mutate", body)
        timings.append(time.perf_counter() - started)
    return timings


def serve_forever(cert_file: str, key_file: str, ports: multiprocessing.Queue[int]) -> None:
    """The server, in a process of its own so that the client does not share its core."""
    store = PolicyStore(ROOT / "config" / "policy.yaml")
    store.load()
    certificate = ReloadingCertificate(cert_file, key_file)
    certificate.load()

    async def run() -> None:
        runner = web.AppRunner(build_webhook_app(store), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.context).start()
        ports.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(run())


async def over_https(
    port: int, client: ssl.SSLContext, body: bytes, requests: int, concurrency: int
) -> tuple[float, list[float]]:
    url = f"https://127.0.0.1:{port}/mutate"
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=client)
    async with aiohttp.ClientSession(connector=connector) as session:
        headers = {"Content-Type": "application/json"}

        async def one() -> None:
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                assert response.status == 200
            latencies.append(time.perf_counter() - started)

        async def worker(count: int) -> None:
            for _ in range(count):
                await one()

        await asyncio.gather(*(one() for _ in range(concurrency)))  # open the connections
        latencies.clear()
        started = time.perf_counter()
        await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    store = PolicyStore(ROOT / "config" / "policy.yaml")
    store.load()
    body = json.dumps(make_review(POD, namespace="inference", uid="bench")).encode()
    local = in_process(store, body, 5000)
    print(
        f"in-process answer ({len(body)} B body): p50 {statistics.median(local) * 1e6:.0f} us, "
        f"p99 {percentile(local, 0.99) * 1e6:.0f} us"
    )
    with tempfile.TemporaryDirectory() as directory:
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1")
        cert_file, key_file = Path(directory, "tls.crt"), Path(directory, "tls.key")
        leaf.cert_chain_pems[0].write_to_path(str(cert_file))
        leaf.private_key_pem.write_to_path(str(key_file))
        ports: multiprocessing.Queue[int] = multiprocessing.Queue()
        server = multiprocessing.Process(
            target=serve_forever, args=(str(cert_file), str(key_file), ports), daemon=True
        )
        server.start()
        try:
            client = ssl.create_default_context()
            ca.configure_trust(client)
            port = ports.get(timeout=30)
            rate, latencies = asyncio.run(
                over_https(port, client, body, args.requests, args.concurrency)
            )
        finally:
            server.terminate()
            server.join()
    print(
        f"over HTTPS, {args.concurrency} connections: {rate:.0f} requests/s, "
        f"p50 {statistics.median(latencies) * 1e3:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1e3:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
