"""cProfile (CPU time) of the hot paths, top functions by own time.

    python bench/profile_hot_paths.py webhook [--count 3000]
    python bench/profile_hot_paths.py controller --kubeconfig K

webhook: `quotaguard.webhook.server.answer` (JSON decode, engine, encode) on the 11 KB
/mutate and /validate bodies of bench/realistic_pod.py, as the server calls it per request.
controller: the pods watch's initial list (`Watch.list_once`) against a real API server, e.g.
the one bench/bench_controller_e2e.py leaves behind with --workdir (its kubeconfig is there).
Profiling inflates Python-heavy code against C code (json, ssl): read shares, not absolute
times, and confirm any fix with the benches.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.realistic_pod import POLICY_FILE, mutate_and_validate_bodies

TOP = 25


def profile_webhook(count: int) -> cProfile.Profile:
    from quotaguard.admission import engine
    from quotaguard.serve.policystore import PolicyStore
    from quotaguard.webhook.server import answer

    store = PolicyStore(POLICY_FILE)
    store.load()
    mutate, validate = mutate_and_validate_bodies()
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for _ in range(count):
        answer(store, engine.review, "mutate", mutate)
        answer(store, engine.review, "validate", validate)
    profiler.disable()
    return profiler


def profile_controller(kubeconfig: str) -> cProfile.Profile:
    from quotaguard.controller.kube_clients import KubeClients, ServedGroups
    from quotaguard.controller.watch import Watch
    from quotaguard.controller.watch_sources import wanted_sources
    from quotaguard.policy.loader import load_policy_file

    policy = load_policy_file(POLICY_FILE)
    clients = KubeClients.connect(kubeconfig)
    pods = wanted_sources(clients, policy, ServedGroups(kueue=None, volcano=False))["pods"]
    watch = Watch(pods.kind)
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    watch.list_once()
    profiler.disable()
    return profiler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=("webhook", "controller"))
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--kubeconfig")
    args = parser.parse_args()
    if args.path == "webhook":
        profiler = profile_webhook(args.count)
    elif args.kubeconfig:
        profiler = profile_controller(args.kubeconfig)
    else:
        parser.error("controller needs --kubeconfig")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(TOP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
