"""The webhook's memory under hostile load, on 127.0.0.1: `quotaguard serve --components
webhook` as a subprocess, 2,000 connections held open at once (half idle after the TLS
handshake, half sending their headers a byte every second), then the 24,000-container Pod
posted four times in parallel. Prints peak and current RSS (from /proc) and the load average.

    python -m bench.webhook_memory [--connections 2000]

Target: peak RSS under the shipped 256 Mi limit (charts/quotaguard/values.yaml).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trustme

from quotaguard.admission.reviews import make_review

ROOT = Path(__file__).resolve().parents[1]


def rss(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    found = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) // 1024  # MiB
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def big_pod_body() -> bytes:
    resources = {"limits": {"nvidia.com/gpu": "1"}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "big"},
        "spec": {
            "containers": [
                {"name": f"c{i}", "image": "x", "resources": resources} for i in range(24_000)
            ]
        },
    }
    return json.dumps(make_review(pod, namespace="training", uid="big")).encode()


def post(port: int, context: ssl.SSLContext, body: bytes) -> tuple[int, int, float]:
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        head = (
            f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), len(data), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=2000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="qg-mem-"))
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(str(work / "tls.key"))
    leaf.cert_chain_pems[0].write_to_path(str(work / "tls.crt"))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    port, http_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "quotaguard", "serve", "--components", "webhook",
         "--policy", str(ROOT / "config" / "policy.yaml"), "--bind-address", "127.0.0.1",
         "--webhook-port", str(port), "--http-port", str(http_port),
         "--tls-cert-file", str(work / "tls.crt"), "--tls-key-file", str(work / "tls.key"),
         "--reports-auth", "none"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        print("started:", rss(server.pid))
        held: list[ssl.SSLSocket] = []
        refused = 0
        for n in range(args.connections):
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
                if n % 2:
                    sock.sendall(b"POST /validate HTTP/1.1\r\n")  # slow headers from here
                held.append(sock)
            except OSError:
                refused += 1
        print(
            f"{args.connections} connections opened ({refused} refused at once):", rss(server.pid)
        )
        time.sleep(12)
        print("12 s later (slow and idle ones timed out):", rss(server.pid))
        bodies = big_pod_body()
        results: list[object] = []

        def one() -> None:
            try:
                results.append(post(port, context, bodies))
            except OSError as exc:
                results.append(repr(exc))

        threads = [threading.Thread(target=one) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print("4 x 24,000-container Pod (status, answer bytes, seconds):", results)
        print("after the large Pods:", rss(server.pid))
        for sock in held:
            sock.close()
        print("load average:", os.getloadavg())
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
