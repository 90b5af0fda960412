"""A helm post-renderer for the e2e cluster: the chart's manifests on stdin, the same on stdout
with every webhook pointed at `https://127.0.0.1:PORT` and the cluster CA (there is no kubelet
or kube-proxy, so the API server cannot reach the Service; a quotaguard process on this machine
answers instead). Nothing else changes, so what is installed is the chart as users get it.

    python -m e2e.helm_post_render PORT CA_BUNDLE_BASE64 < manifests > manifests
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import yaml

from e2e.cluster import rewrite_webhook_configurations

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def point_webhooks_here(text: str, *, port: int, ca_bundle: str) -> str:
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    out = []
    for doc in docs:
        if doc.get("kind") in WEBHOOK_KINDS:
            (doc,) = rewrite_webhook_configurations([doc], port=port, ca_bundle=ca_bundle)
        out.append(doc)
    return yaml.safe_dump_all(out, sort_keys=False)


def main(argv: Sequence[str]) -> int:
    port, ca_bundle = argv
    sys.stdout.write(point_webhooks_here(sys.stdin.read(), port=int(port), ca_bundle=ca_bundle))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
