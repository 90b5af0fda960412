"""A loopback TCP round-robin: what the webhook Service does for the API server in a cluster
(kube-proxy spreading connections over the Service's endpoints), for the scale bench, where
there is no kube-proxy and `clientConfig.url` names one address.

    python bench/round_robin.py --listen PORT --to PORT1,PORT2

Each accepted connection goes to the next backend in turn; bytes are copied both ways
untouched (TLS passes through: the API server talks to the webhook replica itself, and the
replicas share the certificate's names). Unlike kube-proxy's in-kernel NAT it is a user-space
process that costs CPU and a little latency per connection; the bench measures that CPU
separately. Prints the connections it gave each backend to stdout on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys

CHUNK = 64 * 1024


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(listen: int, backends: list[int]) -> dict[int, int]:
    turn = itertools.cycle(backends)
    given = dict.fromkeys(backends, 0)

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = next(turn)
        given[port] += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(connected, "127.0.0.1", listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
    return given


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--to", required=True, help="comma-separated backend ports on 127.0.0.1")
    args = parser.parse_args()
    given = asyncio.run(serve(args.listen, [int(p) for p in args.to.split(",")]))
    print(" ".join(f"{port}:{count}" for port, count in given.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
