"""The baselines for the webhook bench: aiohttp on the same TLS settings, answering "allowed".

Bare (default): reads the body, as any server must, and answers one fixed AdmissionReview, so
the gap to it is everything quotaguard does with a request. With --parse: also decodes the
body with the standard library's json and echoes request.uid, the least any webhook written
in Python must do, so the gap to it is quotaguard's decision and bookkeeping.

    python bench/bare_webhook.py --port P --tls-cert-file F --tls-key-file K [--parse]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quotaguard.serve.tlsreload import new_server_context

ALLOW = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
    b'"response":{"uid":"bench-0001","allowed":true}}'
)


async def allow(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=ALLOW, content_type="application/json")


async def parse_and_allow(request: web.Request) -> web.Response:
    review = json.loads(await request.read())
    answer = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
    return web.Response(body=json.dumps(answer).encode(), content_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-key-file", required=True)
    parser.add_argument("--parse", action="store_true", help="decode the body, echo the uid")
    args = parser.parse_args()
    context = new_server_context()
    context.load_cert_chain(args.tls_cert_file, args.tls_key_file)
    app = web.Application(client_max_size=7 * 1024 * 1024)
    handler = parse_and_allow if args.parse else allow
    app.router.add_post("/mutate", handler)
    app.router.add_post("/validate", handler)
    web.run_app(
        app, host="127.0.0.1", port=args.port, ssl_context=context, access_log=None, print=None
    )


if __name__ == "__main__":
    main()
