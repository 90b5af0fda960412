"""`python -m e2e`: start the e2e control plane for a person to poke at; Ctrl-C stops it."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from e2e import build
from e2e.cluster import Cluster, mig_node, shared_gpu_node, whole_gpu_node


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e", description=__doc__)
    parser.add_argument(
        "--no-controllers", action="store_true", help="no kube-controller-manager / kube-scheduler"
    )
    parser.add_argument(
        "--no-nodes", action="store_true", help="do not create the sample GPU nodes"
    )
    parser.add_argument(
        "--build", action="store_true", help="build the toolchain first when it is missing"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory on exit")
    args = parser.parse_args(argv)

    tc = build.toolchain()
    if tc.missing():
        if not args.build:
            print(
                "e2e toolchain missing: run `python -m e2e.build` (or pass --build):\n  "
                + "\n  ".join(tc.missing()),
                file=sys.stderr,
            )
            return 2
        tc = build.ensure_toolchain()

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    cluster = Cluster(tc, controllers=not args.no_controllers, verbose=True)
    try:
        cluster.start()
        if not args.no_nodes:
            cluster.add_nodes(
                whole_gpu_node("gpu-h100-0", 8),
                mig_node("gpu-mig-0"),
                shared_gpu_node("gpu-shared-0", 2, 4),
            )
        print(f"\ncontrol plane up at {cluster.server}; logs in {cluster.logs}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print("Ctrl-C stops it.", flush=True)
        while not stop.wait(1.0):
            for proc in cluster.processes.values():
                proc.check_alive()
    except Exception as err:
        print(f"error: {err}\n{cluster.failure_report()}", file=sys.stderr)
        cluster.stop()
        return 1
    print("stopping ...", flush=True)
    if args.keep:
        cluster.stop()
        print(f"kept {cluster.workdir}")
    else:
        cluster.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
