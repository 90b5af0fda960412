"""`quotaguard certs` against a faked cluster and on a directory: what it writes, in which order,
and that its result is something a TLS client holding the caBundle accepts."""

from __future__ import annotations

import base64
import copy
import datetime
import io
import json
import socket
import ssl
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from quotaguard.certs.builders import CertSettings, load_certificates
from quotaguard.cli import main
from quotaguard.commands import certs as command
from quotaguard.commands.certs import Targets, run_cluster
from quotaguard.commands.certs_cluster import (
    MUTATING,
    VALIDATING,
    CertsError,
    ConflictError,
    KubernetesCluster,
)

NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
NS = "quotaguard-system"
TARGETS = Targets(
    namespace=NS,
    secret="quotaguard-webhook-tls",
    ca_secret="quotaguard-webhook-ca",
    webhook_configurations=(
        (MUTATING, "00-quotaguard-mutating"),
        (VALIDATING, "quotaguard-validating"),
        (VALIDATING, "quotaguard-validating-resources"),
    ),
)
KINDS = ("pods", "jobs", "jobsets", "volcanojobs")


def webhook_configuration(kind: str, name: str, verb: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {"name": f"{k}.{verb}.quotaguard.dev", "clientConfig": {"service": {"name": "x"}}}
            for k in KINDS
        ],
    }


class FakeCluster:
    """ClusterPort in memory; records every write in order and applies JSON patches."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.configurations = {
            (MUTATING, "00-quotaguard-mutating"): webhook_configuration(
                MUTATING, "00-quotaguard-mutating", "mutate"
            ),
            (VALIDATING, "quotaguard-validating"): webhook_configuration(
                VALIDATING, "quotaguard-validating", "validate"
            ),
            (VALIDATING, "quotaguard-validating-resources"): webhook_configuration(
                VALIDATING, "quotaguard-validating-resources", "validate"
            ),
        }
        self.writes: list[str] = []
        self.version = 0
        self.conflict_on_replace = False

    def read_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.secrets.get((namespace, name))
        return copy.deepcopy(found) if found else None

    def create_secret(self, namespace: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if (namespace, name) in self.secrets:
            raise ConflictError("exists")
        self._store(namespace, body)
        self.writes.append(f"create Secret {name}")

    def replace_secret(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        current = self.secrets[(namespace, name)]
        if self.conflict_on_replace or (
            body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]
        ):
            raise ConflictError(f"update Secret {namespace}/{name}: changed meanwhile; run again")
        self._store(namespace, body)
        self.writes.append(f"update Secret {name}")

    def _store(self, namespace: str, body: dict[str, Any]) -> None:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.secrets[(namespace, body["metadata"]["name"])] = stored

    def read_webhook_configuration(self, kind: str, name: str) -> dict[str, Any] | None:
        found = self.configurations.get((kind, name))
        return copy.deepcopy(found) if found else None

    def patch_webhook_configuration(
        self, kind: str, name: str, patch: list[dict[str, Any]]
    ) -> None:
        configuration = self.configurations[(kind, name)]
        for op in patch:
            _, _, index, *rest = op["path"].split("/")
            webhook = configuration["webhooks"][int(index)]
            if op["op"] == "test":
                assert webhook["name"] == op["value"]
            else:
                assert op["op"] == "add" and rest == ["clientConfig", "caBundle"]
                webhook["clientConfig"]["caBundle"] = op["value"]
        self.writes.append(f"patch {name}")

    # what a user would look at
    def data(self, name: str) -> dict[str, bytes]:
        secret = self.secrets[(NS, name)]
        return {k: base64.b64decode(v) for k, v in secret["data"].items()}

    def ca_bundles(self) -> set[bytes]:
        return {
            base64.b64decode(hook["clientConfig"]["caBundle"])
            for configuration in self.configurations.values()
            for hook in configuration["webhooks"]
        }


def run(
    cluster: FakeCluster, now: datetime.datetime = NOW, *, dry_run: bool = False
) -> tuple[int, str]:
    out = io.StringIO()
    code = run_cluster(cluster, TARGETS, CertSettings(), now, dry_run=dry_run, out=out)
    return code, out.getvalue()


def handshake(cert_pem: bytes, key_pem: bytes, bundle: bytes, server_name: str, tmp: Path) -> str:
    """A real TLS handshake: server with the pair, client trusting only `bundle` and checking
    `server_name`, as the API server does. Returns the negotiated protocol version."""
    (tmp / "c.pem").write_bytes(cert_pem)
    (tmp / "k.pem").write_bytes(key_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp / "c.pem", tmp / "k.pem")
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cadata=bundle.decode())
    left, right = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(left, server_side=True) as s:
                s.recv(1)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(right, server_hostname=server_name) as c:
            version = c.version() or ""
            c.send(b"x")
    finally:
        thread.join(5)
        left.close()
    return version


def signed_by_bundle(cert_pem: bytes, bundle: bytes) -> bool:
    cert = load_certificates(cert_pem)[0]
    for ca in load_certificates(bundle):
        try:
            cert.verify_directly_issued_by(ca)
        except Exception:
            continue
        return True
    return False


def test_first_run_creates_ca_then_bundle_then_serving_secret() -> None:
    cluster = FakeCluster()
    code, out = run(cluster)
    assert code == 0
    assert cluster.writes == [
        "create Secret quotaguard-webhook-ca",
        "patch 00-quotaguard-mutating",
        "patch quotaguard-validating",
        "patch quotaguard-validating-resources",
        "create Secret quotaguard-webhook-tls",
    ]
    serving = cluster.secrets[(NS, "quotaguard-webhook-tls")]
    assert serving["type"] == "kubernetes.io/tls"
    assert set(serving["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    bundle = cluster.data("quotaguard-webhook-tls")["ca.crt"]
    assert cluster.ca_bundles() == {bundle}
    assert "created Secret quotaguard-system/quotaguard-webhook-tls" in out
    assert (
        "patched caBundle of MutatingWebhookConfiguration 00-quotaguard-mutating"
        " (4 webhooks: no trust bundle yet)"
    ) in out


def test_the_api_server_would_accept_the_serving_cert(tmp_path: Path) -> None:
    cluster = FakeCluster()
    run(cluster, datetime.datetime.now(datetime.UTC))  # the handshake checks the real clock
    tls = cluster.data("quotaguard-webhook-tls")
    (bundle,) = cluster.ca_bundles()
    version = handshake(
        tls["tls.crt"], tls["tls.key"], bundle, "quotaguard-webhook.quotaguard-system.svc", tmp_path
    )
    assert version in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tls["tls.crt"], tls["tls.key"], bundle, "evil.example.com", tmp_path)


def test_second_run_writes_nothing() -> None:
    cluster = FakeCluster()
    run(cluster)
    cluster.writes.clear()
    code, out = run(cluster, NOW + 30 * DAY)
    assert code == 0
    assert cluster.writes == []
    assert "certificates are up to date" in out


def test_dry_run_prints_the_plan_and_writes_nothing() -> None:
    cluster = FakeCluster()
    code, out = run(cluster, dry_run=True)
    assert code == 0
    assert cluster.writes == [] and cluster.secrets == {}
    assert out.splitlines()[0] == (
        "would create Secret quotaguard-system/quotaguard-webhook-ca (no CA yet)"
    )
    assert "would patch caBundle of ValidatingWebhookConfiguration quotaguard-validating" in out


def test_serving_renewal_rewrites_only_the_serving_secret() -> None:
    cluster = FakeCluster()
    run(cluster)
    before = cluster.data("quotaguard-webhook-tls")
    cluster.writes.clear()
    code, _ = run(cluster, NOW + 250 * DAY)
    assert code == 0
    assert cluster.writes == ["update Secret quotaguard-webhook-tls"]
    after = cluster.data("quotaguard-webhook-tls")
    assert after["tls.crt"] != before["tls.crt"] and after["ca.crt"] == before["ca.crt"]


def test_ca_rotation_patches_the_bundle_before_the_new_serving_cert_and_keeps_the_old_ca() -> None:
    cluster = FakeCluster()
    run(cluster)
    old_ca = cluster.data("quotaguard-webhook-ca")["tls.crt"]
    old_tls = cluster.data("quotaguard-webhook-tls")
    cluster.writes.clear()
    code, out = run(cluster, NOW + 1300 * DAY)
    assert code == 0
    assert cluster.writes == [
        "update Secret quotaguard-webhook-ca",
        "patch 00-quotaguard-mutating",
        "patch quotaguard-validating",
        "patch quotaguard-validating-resources",
        "update Secret quotaguard-webhook-tls",
    ]
    (bundle,) = cluster.ca_bundles()
    new_ca = cluster.data("quotaguard-webhook-ca")["tls.crt"]
    assert [c.subject for c in load_certificates(bundle)] == [
        load_certificates(new_ca)[0].subject,
        load_certificates(old_ca)[0].subject,
    ]
    assert "the previous one stays until it expires" in out
    # both the new serving certificate and one the old CA signed verify against the bundle
    new_tls = cluster.data("quotaguard-webhook-tls")
    assert signed_by_bundle(new_tls["tls.crt"], bundle)
    assert signed_by_bundle(old_tls["tls.crt"], bundle)


def test_missing_webhook_configuration_still_writes_the_secrets_and_fails() -> None:
    cluster = FakeCluster()
    del cluster.configurations[(VALIDATING, "quotaguard-validating")]
    code, _ = run(cluster)
    assert code == 1
    assert "create Secret quotaguard-webhook-tls" in cluster.writes
    assert "patch 00-quotaguard-mutating" in cluster.writes


def test_a_secret_from_cert_manager_is_not_touched() -> None:
    cluster = FakeCluster()
    cluster.secrets[(NS, "quotaguard-webhook-tls")] = {
        "metadata": {
            "name": "quotaguard-webhook-tls",
            "resourceVersion": "1",
            "annotations": {"cert-manager.io/certificate-name": "quotaguard-webhook"},
        },
        "data": {},
    }
    with pytest.raises(CertsError, match="managed by cert-manager"):
        run(cluster)
    assert cluster.writes == []


def test_a_concurrent_change_is_a_conflict_not_an_overwrite() -> None:
    cluster = FakeCluster()
    run(cluster)
    cluster.conflict_on_replace = True
    with pytest.raises(ConflictError):
        run(cluster, NOW + 250 * DAY)


def test_cli_exit_codes_with_a_faked_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster()
    monkeypatch.setattr(
        KubernetesCluster, "connect", classmethod(lambda cls, kubeconfig, context=None: cluster)
    )
    assert main(["certs", "--kubeconfig", "/nonexistent"]) == 0
    assert len(cluster.secrets) == 2
    cluster.conflict_on_replace = True
    cluster.secrets[(NS, "quotaguard-webhook-tls")]["data"]["ca.crt"] = ""
    assert main(["certs"]) == 1
    assert "run again" in capsys.readouterr().err


def test_cli_reports_an_unloadable_kubeconfig_as_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["certs", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ip-address", "localhost"], "--ip-address"),
        (["--cert-validity", "ten days"], "--cert-validity"),
        (["--renew-before", "9000h"], "--renew-before"),
    ],
)
def test_cli_rejects_bad_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["certs", "--out-dir", str(tmp_path), *flags]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_out_dir_writes_a_usable_local_pair_and_is_idempotent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "tls"
    args = ["certs", "--out-dir", str(out_dir), "--ip-address", "127.0.0.1"]
    assert main(args) == 0
    files = {p.name for p in out_dir.iterdir()}
    assert files == {"ca.crt", "ca.key", "ca-bundle.crt", "tls.crt", "tls.key"}
    for private in ("ca.key", "tls.key"):
        assert stat.S_IMODE((out_dir / private).stat().st_mode) == 0o600
    version = handshake(
        (out_dir / "tls.crt").read_bytes(),
        (out_dir / "tls.key").read_bytes(),
        (out_dir / "ca-bundle.crt").read_bytes(),
        "127.0.0.1",
        tmp_path,
    )
    assert version
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    assert main(args) == 0
    assert "certificates are up to date" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before


def test_out_dir_dry_run_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certs", "--out-dir", str(tmp_path / "x"), "--dry-run"]) == 0
    assert not (tmp_path / "x").exists()
    assert capsys.readouterr().out.startswith("would write CA ")


class FakeResponse:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class FakeApis:
    """CoreV1Api / AdmissionregistrationV1Api stand-ins recording the calls they get."""

    def __init__(self, error: int | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> FakeResponse:
            self.calls.append((name, args, kwargs))
            if self.error:
                raise ApiError(self.error)
            return FakeResponse({"metadata": {"name": args[0]}})

        return call


def test_client_adapter_sends_json_patch_and_maps_status_codes() -> None:
    core, admission = FakeApis(), FakeApis()
    port = KubernetesCluster(core, admission)
    assert port.read_secret(NS, "s") == {"metadata": {"name": "s"}}
    patch = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "eA=="}]
    port.patch_webhook_configuration(VALIDATING, "quotaguard-validating", patch)
    name, args, kwargs = admission.calls[-1]
    assert name == "patch_validating_webhook_configuration"
    assert args == ("quotaguard-validating", patch)
    assert kwargs["_content_type"] == "application/json-patch+json"
    assert KubernetesCluster(FakeApis(404), admission).read_secret(NS, "s") is None
    with pytest.raises(ConflictError):
        KubernetesCluster(FakeApis(409), admission).create_secret(NS, {"metadata": {"name": "s"}})
    with pytest.raises(CertsError, match="RBAC"):
        KubernetesCluster(core, FakeApis(403)).read_webhook_configuration(MUTATING, "m")
    with pytest.raises(ApiError):
        KubernetesCluster(FakeApis(500), admission).read_secret(NS, "s")


def test_patch_touches_only_webhooks_lacking_the_bundle() -> None:
    configuration = webhook_configuration(MUTATING, "m", "mutate")
    configuration["webhooks"][1]["clientConfig"]["caBundle"] = base64.b64encode(b"B").decode()
    operations = command.ca_bundle_patch(configuration, b"B")
    paths = [op["path"] for op in operations if op["op"] == "add"]
    assert paths == [
        "/webhooks/0/clientConfig/caBundle",
        "/webhooks/2/clientConfig/caBundle",
        "/webhooks/3/clientConfig/caBundle",
    ]
    assert operations[0] == {
        "op": "test",
        "path": "/webhooks/0/name",
        "value": "pods.mutate.quotaguard.dev",
    }
