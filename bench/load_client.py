"""A bounded HTTPS load generator in a process of its own; prints one JSON line of results.

Open loop (`--rate`): request i is due at start + i/rate whatever happened before, and its
latency counts from when it was due, so a server that stalls is charged for the queue it
causes (no coordinated omission). Closed loop (`--connections`): that many connections post
back to back, for throughput when wrk is not installed.

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
from pathlib import Path

import aiohttp

HEADERS = {"Content-Type": "application/json"}


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


async def open_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, rate: float, seconds: float
) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0

    async def one(due: float) -> None:
        nonlocal errors
        try:
            async with session.post(url, data=body, headers=HEADERS) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
                    return
        except aiohttp.ClientError:
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


async def closed_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, connections: int, seconds: float
) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            async with session.post(url, data=body, headers=HEADERS) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
                    continue
            latencies.append(time.perf_counter() - started)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return summary(latencies, errors, time.perf_counter() - start)


async def run(args: argparse.Namespace) -> dict[str, float]:
    context = ssl.create_default_context(cafile=args.cafile)
    body = Path(args.body).read_bytes()
    pool = args.connections or 64
    connector = aiohttp.TCPConnector(limit=pool, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm up: open connections and let both ends settle, uncounted.
        await closed_loop(session, args.url, body, min(pool, 16), 1.0)
        if args.rate:
            return await open_loop(session, args.url, body, args.rate, args.seconds)
        return await closed_loop(session, args.url, body, args.connections, args.seconds)


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
