"""A bounded HTTPS load generator in a process of its own; prints one JSON line of results.

Open loop (`--rate`): request i is due at start + i/rate whatever happened before, and its
latency counts from when it was due, so a server that stalls is charged for the queue it
causes (no coordinated omission). Closed loop (`--connections`): that many connections post
back to back, for throughput when wrk is not installed.

HTTP/1.1 over asyncio's TLS streams with the request bytes built once and keep-alive
connections from a bounded pool: a general-purpose client costs about a millisecond of
Python per request, which would show up in every latency measured.

    python bench/load_client.py URL --body FILE --cafile CA --rate 200 --seconds 15
    python bench/load_client.py URL --body FILE --cafile CA --connections 16 --seconds 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
import urllib.parse
from pathlib import Path

POOL = 64


class Pool:
    """Up to `size` keep-alive connections; a request waits for a free one."""

    def __init__(self, url: str, context: ssl.SSLContext, body: bytes, size: int) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 443
        self.context = context
        self.request = (
            f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(size)

    async def post(self) -> int:
        """One request; its HTTP status (0 when the connection failed)."""
        async with self.slots:
            if self.idle:
                reader, writer = self.idle.pop()
            else:
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.context, server_hostname=self.host
                )
            try:
                writer.write(self.request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                writer.close()
                return 0
            self.idle.append((reader, writer))
            return status

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def summary(latencies: list[float], errors: int, elapsed: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "errors": errors,
        "seconds": round(elapsed, 3),
        "rate": round(len(ordered) / elapsed, 1),
        "p50_ms": round(percentile(ordered, 0.50) * 1e3, 3),
        "p90_ms": round(percentile(ordered, 0.90) * 1e3, 3),
        "p99_ms": round(percentile(ordered, 0.99) * 1e3, 3),
        "max_ms": round((ordered[-1] if ordered else 0.0) * 1e3, 3),
    }


async def open_loop(pool: Pool, rate: float, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0

    async def one(due: float) -> None:
        nonlocal errors
        if await pool.post() != 200:
            errors += 1
            return
        latencies.append(time.perf_counter() - due)

    count = int(rate * seconds)
    tasks = []
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    return summary(latencies, errors, time.perf_counter() - start)


async def closed_loop(pool: Pool, connections: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            if await pool.post() != 200:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return summary(latencies, errors, time.perf_counter() - start)


async def run(args: argparse.Namespace) -> dict[str, float]:
    context = ssl.create_default_context(cafile=args.cafile)
    pool = Pool(args.url, context, Path(args.body).read_bytes(), args.connections or POOL)
    try:
        # Warm up: open connections and let both ends settle, uncounted.
        await closed_loop(pool, min(args.connections or POOL, 16), 1.0)
        if args.rate:
            return await open_loop(pool, args.rate, args.seconds)
        return await closed_loop(pool, args.connections, args.seconds)
    finally:
        pool.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--body", required=True)
    parser.add_argument("--cafile", required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, help="open loop, requests per second")
    load.add_argument("--connections", type=int, help="closed loop, connections")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
