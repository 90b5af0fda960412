"""A real Kubernetes control plane on 127.0.0.1 for the e2e suite.

etcd and kube-apiserver (envtest's flag set, certificates made here, an admin client in
system:masters), optionally kube-controller-manager and kube-scheduler, and kwok to keep fake GPU
nodes Ready and pods on them Running. CRDs for Kueue, Volcano and JobSet are installed at start.
Each process logs to a file in the cluster's work directory; `failure_report()` prints their
tails.
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trustme
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from e2e.build import Toolchain

REPO_ROOT = Path(__file__).resolve().parent.parent
WEBHOOK_DIR = REPO_ROOT / "webhook"
KWOK_NODE_LABEL = ("type", "kwok")
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The cluster could not be started or a wait timed out."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2
) -> T:
    """Poll `check` until it returns something other than None/False; raise after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result is not None and result is not False:
                return result
        except Exception as err:  # a poll that raises is a poll that is not ready yet
            last_error = err
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# Processes


class Process:
    """One control-plane binary with its log file; its own session so Ctrl-C reaches us first.
    It is killed when the thread that started it exits: start clusters from a long-lived
    thread (pytest's and `python -m e2e`'s main thread are)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as fh:
            fh.write(f"\n==== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            fh.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env,
                cwd=self.cwd,
                preexec_fn=_die_with_parent,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self.popen = None

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ClusterError(
                f"{self.name} exited with {self.popen.returncode}; "
                f"log {self.log}:\n{tail(self.log, 40)}"
            )


def _die_with_parent() -> None:
    """In the child: SIGKILL when the test process dies, even by SIGKILL or a timeout, so no
    control plane outlives the run that started it (Linux; elsewhere a no-op). SIGKILL, not
    SIGTERM: kube-apiserver waits on its graceful shutdown for a long time once etcd is gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def tail(path: Path, lines: int) -> str:
    if not path.exists():
        return "(no log)"
    return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])


# --------------------------------------------------------------------------------------------
# Certificates


@dataclass(frozen=True)
class ServingCert:
    """A certificate for a server on 127.0.0.1, signed by the cluster CA."""

    cert_file: Path
    key_file: Path
    ca_pem: bytes

    @property
    def ca_bundle(self) -> str:
        """base64 of the CA, as `clientConfig.caBundle` wants it."""
        return base64.b64encode(self.ca_pem).decode()


class Pki:
    """The cluster CA, the API server's serving cert, the admin client and the SA key."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name="quotaguard-e2e")
        self.ca_pem: bytes = self.ca.cert_pem.bytes()
        self.ca_file = directory / "ca.crt"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.ca_key_file = directory / "ca.key"
        self.ca.private_key_pem.write_to_path(str(self.ca_key_file))
        self.server = self.serving_cert(
            "kube-apiserver",
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "10.0.0.1",
        )
        admin = self.ca.issue_cert("admin", common_name="admin", organization_name="system:masters")
        self.admin_cert_pem = admin.cert_chain_pems[0].bytes()
        self.admin_key_pem = admin.private_key_pem.bytes()
        self.admin_cert_file = directory / "admin.crt"
        self.admin_key_file = directory / "admin.key"
        self.admin_cert_file.write_bytes(self.admin_cert_pem)
        self.admin_key_file.write_bytes(self.admin_key_pem)
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key_file = directory / "sa.key"
        self.sa_key_file.write_bytes(
            sa_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        self.sa_pub_file = directory / "sa.pub"
        self.sa_pub_file.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def serving_cert(self, name: str, *hosts: str) -> ServingCert:
        leaf = self.ca.issue_cert(*(hosts or ("127.0.0.1", "localhost")), common_name=name)
        cert_file = self.dir / f"{name}.crt"
        key_file = self.dir / f"{name}.key"
        cert_file.write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
        key_file.write_bytes(leaf.private_key_pem.bytes())
        key_file.chmod(0o600)
        return ServingCert(cert_file=cert_file, key_file=key_file, ca_pem=self.ca_pem)

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.admin_cert_file), str(self.admin_key_file))
        return ctx


# --------------------------------------------------------------------------------------------
# Nodes


def gpu_node(
    name: str,
    resources: Mapping[str, int | str],
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
) -> dict[str, Any]:
    """A kwok-managed Node manifest with the given extended resources as capacity."""
    capacity: dict[str, str] = {
        "cpu": cpu,
        "memory": memory,
        "pods": pods,
        **{k: str(v) for k, v in resources.items()},
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node-role.kubernetes.io/agent": "",
                KWOK_NODE_LABEL[0]: KWOK_NODE_LABEL[1],
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def whole_gpu_node(
    name: str,
    gpus: int = 8,
    *,
    product: str = "NVIDIA-H100-80GB-HBM3",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A node with `gpus` whole GPUs (`nvidia.com/gpu`) labelled like GPU feature discovery."""
    return gpu_node(
        name,
        {"nvidia.com/gpu": gpus},
        labels={
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus),
            **(labels or {}),
        },
    )


def mig_node(
    name: str,
    slices: Mapping[str, int] | None = None,
    *,
    product: str = "NVIDIA-H100-80GB-HBM3",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A node in MIG "mixed" strategy: one resource per profile, e.g. {"1g.10gb": 7}."""
    slices = slices if slices is not None else {"1g.10gb": 7, "3g.40gb": 2}
    return gpu_node(
        name,
        {f"nvidia.com/mig-{profile}": n for profile, n in slices.items()},
        labels={
            "nvidia.com/gpu.product": product,
            "nvidia.com/mig.strategy": "mixed",
            **(labels or {}),
        },
    )


def shared_gpu_node(
    name: str,
    gpus: int = 2,
    replicas: int = 4,
    *,
    product: str = "NVIDIA-H100-80GB-HBM3",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A time-sliced node (renameByDefault): `gpus * replicas` of `nvidia.com/gpu.shared`."""
    return gpu_node(
        name,
        {"nvidia.com/gpu.shared": gpus * replicas},
        labels={
            "nvidia.com/gpu.product": f"{product}-SHARED",
            "nvidia.com/gpu.replicas": str(replicas),
            **(labels or {}),
        },
    )


# --------------------------------------------------------------------------------------------
# Webhook configurations


def gpu_pod(name: str, namespace: str) -> dict[str, Any]:
    """A Pod asking for one whole GPU with a gpu-memory hint (the webhook may rewrite it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"quotaguard.dev/gpu-memory": "8Gi"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/app:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def load_webhook_configurations(directory: Path = WEBHOOK_DIR) -> list[dict[str, Any]]:
    """The Mutating/Validating webhook configurations in `directory`/*.yaml."""
    docs: list[dict[str, Any]] = []
    for f in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in (
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration",
            ):
                docs.append(doc)
    if not docs:
        raise ClusterError(f"no webhook configurations in {directory}/*.yaml")
    return docs


def rewrite_webhook_configurations(
    configs: Iterable[Mapping[str, Any]],
    *,
    port: int,
    ca_bundle: str,
    host: str = "127.0.0.1",
    failure_policy: str | None = None,
) -> list[dict[str, Any]]:
    """Point every webhook at https://host:port<path> with `ca_bundle` instead of a service."""
    out: list[dict[str, Any]] = []
    for config in configs:
        config = json.loads(json.dumps(config))  # deep copy
        default_path = (
            "/mutate" if config["kind"] == "MutatingWebhookConfiguration" else "/validate"
        )
        for hook in config.get("webhooks") or []:
            client = hook.get("clientConfig") or {}
            service = client.get("service") or {}
            path = service.get("path") or default_path
            hook["clientConfig"] = {"url": f"https://{host}:{port}{path}", "caBundle": ca_bundle}
            if failure_policy is not None:
                hook["failurePolicy"] = failure_policy
        config.get("metadata", {}).pop("resourceVersion", None)
        out.append(config)
    return out


@dataclass
class QuotaguardServer:
    """A `quotaguard serve` process started by `Cluster.serve_quotaguard`."""

    process: Process
    webhook_port: int
    http_port: int
    cert: ServingCert
    webhooks: list[dict[str, Any]]

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"


def _trusted_reports(args: Sequence[str]) -> list[str]:
    """`--reports-auth none` unless `args` choose: the suite reads /metrics and /reports over
    plain HTTP on 127.0.0.1, a network it trusts; e2e/test_reports_access.py asks for the
    default (TokenReview and SubjectAccessReview)."""
    return [] if "--reports-auth" in args else ["--reports-auth", "none"]


def tls_ready(port: int, ca_file: Path, host: str = "127.0.0.1") -> bool:
    """True once a TLS server on host:port completes a handshake with a cert from ca_file."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with (
            socket.create_connection((host, port), timeout=2) as raw,
            ctx.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


# --------------------------------------------------------------------------------------------
# The cluster


class Cluster:
    """etcd + kube-apiserver (+ controller-manager, scheduler, kwok) on 127.0.0.1."""

    def __init__(
        self,
        toolchain: Toolchain,
        *,
        workdir: Path | None = None,
        controllers: bool = False,
        kwok: bool = True,
        crds: bool = True,
        extra_crd_dirs: Sequence[Path] = (),
        verbose: bool = False,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        self.toolchain = toolchain
        # more kube-apiserver flags, e.g. --runtime-config and --feature-gates for a beta API
        self.apiserver_args = tuple(apiserver_args)
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="quotaguard-e2e-"))
        self.logs = self.workdir / "logs"
        self.with_controllers = controllers
        self.with_kwok = kwok
        self.with_crds = crds
        self.extra_crd_dirs = tuple(extra_crd_dirs)
        self.verbose = verbose
        self.pki = Pki(self.workdir / "pki")
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.processes: dict[str, Process] = {}
        self.timings: dict[str, float] = {}
        self._write_kubeconfig()
        self._define_processes()
        atexit.register(self.stop)

    # ---- lifecycle -------------------------------------------------------------------------

    def _define_processes(self) -> None:
        tc, pki, kc = self.toolchain, self.pki, str(self.kubeconfig)
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.processes["etcd"] = Process(
            "etcd",
            [
                str(tc.etcd),
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.logs / "etcd.log",
        )
        self.processes["kube-apiserver"] = Process(
            "kube-apiserver",
            [
                str(tc.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.server.cert_file}",
                f"--tls-private-key-file={pki.server.key_file}",
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount",
                "--authorization-mode=RBAC",
                f"--client-ca-file={pki.ca_file}",
                f"--service-account-issuer={self.server}",
                f"--service-account-key-file={pki.sa_pub_file}",
                f"--service-account-signing-key-file={pki.sa_key_file}",
                "--endpoint-reconciler-type=none",
                *self.apiserver_args,
            ],
            self.logs / "kube-apiserver.log",
        )
        if self.with_controllers:
            auth = [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
            ]
            self.processes["kube-controller-manager"] = Process(
                "kube-controller-manager",
                [
                    str(tc.kube_controller_manager),
                    *auth,
                    f"--secure-port={free_port()}",
                    f"--service-account-private-key-file={pki.sa_key_file}",
                    f"--root-ca-file={pki.ca_file}",
                    f"--cluster-signing-cert-file={pki.ca_file}",
                    f"--cluster-signing-key-file={pki.ca_key_file}",
                    "--controllers=*",
                    # Each controller under its own service account, as in kubeadm and managed
                    # clusters: admission believes a pod's owner reference only from them.
                    "--use-service-account-credentials",
                    "--concurrent-job-syncs=5",
                ],
                self.logs / "kube-controller-manager.log",
            )
            self.processes["kube-scheduler"] = Process(
                "kube-scheduler",
                [
                    str(tc.kube_scheduler),
                    *auth,
                    f"--secure-port={free_port()}",
                ],
                self.logs / "kube-scheduler.log",
            )
        if self.with_kwok:
            self.processes["kwok"] = Process(
                "kwok",
                [
                    str(tc.kwok),
                    f"--kubeconfig={kc}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-label-selector={'='.join(KWOK_NODE_LABEL)}",
                    f"--config={tc.kwok_stages}",
                    "--node-ip=127.0.0.1",
                    f"--node-port={free_port()}",
                    f"--server-address=127.0.0.1:{free_port()}",
                ],
                self.logs / "kwok.log",
            )

    def _timed(self, name: str, fn: Callable[[], None]) -> None:
        start = time.monotonic()
        fn()
        self.timings[name] = round(time.monotonic() - start, 2)
        if self.verbose:
            print(f"[e2e] {name}: {self.timings[name]}s", flush=True)

    def start(self) -> Cluster:
        try:
            self._timed("etcd", self._start_etcd)
            self._timed("kube-apiserver", self.start_apiserver)
            if self.with_crds:
                self._timed("crds", self.install_crds)
            for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                if name in self.processes:
                    self.processes[name].start()
            if self.with_controllers:
                self._timed("controllers", self._wait_controllers)
            for name in ("kube-scheduler", "kwok"):
                if name in self.processes:
                    time.sleep(0.2)
                    self.processes[name].check_alive()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process: extra ones (quotaguard) first, etcd last."""
        core = ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
        extra = [n for n in self.processes if n not in core]
        for name in [*extra, *core]:
            if name in self.processes:
                self.processes[name].stop()

    def cleanup(self) -> None:
        """Stop everything and remove the work directory (logs included)."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_etcd(self) -> None:
        proc = self.processes["etcd"]
        proc.start()
        url = f"http://127.0.0.1:{self.etcd_port}/health"

        def healthy() -> bool:
            proc.check_alive()
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(json.load(resp).get("health") == "true")

        wait_until(healthy, timeout=30, what="etcd /health")

    def start_apiserver(self, timeout: float = 90) -> None:
        proc = self.processes["kube-apiserver"]
        proc.start()

        def ready() -> bool:
            proc.check_alive()
            return self.readyz()

        wait_until(ready, timeout=timeout, what="kube-apiserver /readyz")

    def stop_apiserver(self) -> None:
        self.processes["kube-apiserver"].stop()

    def restart_apiserver(self, downtime: float = 0.0) -> float:
        """Stop the API server (etcd keeps the data), wait `downtime`, start it; the seconds
        from the stop until it is ready again."""
        start = time.monotonic()
        self.stop_apiserver()
        time.sleep(downtime)
        self.start_apiserver()
        return time.monotonic() - start

    def readyz(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"{self.server}/readyz", timeout=3, context=self.pki.client_context()
            ) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def install_crds(self, timeout: float = 120, directories: Sequence[Path] = ()) -> None:
        """Create the Kueue, JobSet and Volcano CRDs (and those in `extra_crd_dirs`), or only
        those in `directories`, and wait until all are Established."""
        for directory in directories or (*self.toolchain.crd_dirs, *self.extra_crd_dirs):
            if any(directory.glob("*.yaml")):
                # create, not apply: the cluster is new, and server-side apply of Kueue's large
                # schemas costs seconds of managed-fields bookkeeping.
                self.kubectl("create", "-f", str(directory))

        def all_established() -> bool:
            # Polled by hand: `kubectl wait` errors out on a CRD that has no conditions yet.
            for crd in self.get("customresourcedefinitions")["items"]:
                conditions = crd.get("status", {}).get("conditions") or []
                if not any(
                    c["type"] == "Established" and c["status"] == "True" for c in conditions
                ):
                    return False
            return True

        wait_until(all_established, timeout=timeout, interval=0.3, what="CRDs Established")

    def _wait_controllers(self) -> None:
        # The serviceaccount controller creating `default` shows kube-controller-manager works.
        def has_default_sa() -> bool:
            self.processes["kube-controller-manager"].check_alive()
            return (
                self.kubectl(
                    "get", "serviceaccount", "default", "-n", "default", check=False
                ).returncode
                == 0
            )

        wait_until(
            has_default_sa,
            timeout=90,
            interval=0.5,
            what="kube-controller-manager (default ServiceAccount)",
        )

    # ---- clients --------------------------------------------------------------------------

    def _write_kubeconfig(self) -> None:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "e2e",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self.pki.ca_pem),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(self.pki.admin_cert_pem),
                        "client-key-data": b64(self.pki.admin_key_pem),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def env(self) -> dict[str, str]:
        """The environment for a child process that should talk to this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster. check=True raises ClusterError on failure."""
        argv = [str(self.toolchain.kubectl), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            check=False,
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): "
                f"{proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc

    def get(self, *args: str, namespace: str | None = None) -> Any:
        """`kubectl get ARGS -o json`, parsed."""
        ns = ["-n", namespace] if namespace else []
        return json.loads(self.kubectl("get", *args, *ns, "-o", "json").stdout)

    def apply(
        self,
        manifests: str | Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        server_side: bool = True,
    ) -> str:
        """Apply YAML text, one object, or a list of objects; returns kubectl's output."""
        if isinstance(manifests, str):
            text = manifests
        elif isinstance(manifests, Mapping):
            text = yaml.safe_dump(dict(manifests))
        else:
            text = yaml.safe_dump_all([dict(m) for m in manifests])
        ns = ["-n", namespace] if namespace else []
        ssa = ["--server-side", "--force-conflicts", "--field-manager=e2e"] if server_side else []
        return self.kubectl("apply", *ssa, *ns, "-f", "-", input=text).stdout

    def create(
        self, manifest: Mapping[str, Any], *, namespace: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl create -o json`: admission sees a CREATE. check=False to look at denials."""
        ns = ["-n", namespace] if namespace else []
        return self.kubectl(
            "create", *ns, "-o", "json", "-f", "-", input=json.dumps(manifest), check=check
        )

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": dict(labels or {})},
            }
        )

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` for this cluster (the kubernetes package)."""
        from kubernetes import config  # imported here: only tests that want it pay for it

        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )

    # ---- nodes -----------------------------------------------------------------------------

    def add_nodes(self, *nodes: Mapping[str, Any], ready_timeout: float | None = 60) -> None:
        """Create kwok nodes (see gpu_node & co.); wait until kwok reports them Ready."""
        for node in nodes:
            self.kubectl("create", "-f", "-", input=json.dumps(node))
        if ready_timeout is not None:
            self.wait_nodes_ready(*(n["metadata"]["name"] for n in nodes), timeout=ready_timeout)

    def node_ready(self, name: str) -> bool:
        node = self.get("node", name)
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    def wait_nodes_ready(self, *names: str, timeout: float = 60) -> None:
        for name in names:
            wait_until(
                lambda n=name: self.node_ready(n),  # type: ignore[misc]
                timeout=timeout,
                interval=0.3,
                what=f"node {name} Ready",
            )

    # ---- webhooks --------------------------------------------------------------------------

    def serving_cert(
        self, name: str = "quotaguard-webhook", hosts: Sequence[str] = ("127.0.0.1", "localhost")
    ) -> ServingCert:
        """A serving certificate signed by the cluster CA, for a webhook on 127.0.0.1."""
        return self.pki.serving_cert(name, *hosts)

    def register_webhooks(
        self,
        port: int,
        *,
        cert: ServingCert | None = None,
        directory: Path = WEBHOOK_DIR,
        configs: Iterable[Mapping[str, Any]] | None = None,
        failure_policy: str | None = None,
    ) -> list[dict[str, Any]]:
        """Register quotaguard's webhook configurations (webhook/*.yaml, or `configs`) with
        `clientConfig.url: https://127.0.0.1:<port>/...` and the cluster CA as caBundle."""
        ca_bundle = cert.ca_bundle if cert else base64.b64encode(self.pki.ca_pem).decode()
        source = list(configs) if configs is not None else load_webhook_configurations(directory)
        rewritten = rewrite_webhook_configurations(
            source, port=port, ca_bundle=ca_bundle, failure_policy=failure_policy
        )
        self.apply(rewritten)
        return rewritten

    def unregister_webhooks(self, configs: Iterable[Mapping[str, Any]]) -> None:
        for config in configs:
            kind = str(config["kind"]).lower()
            self.kubectl("delete", kind, config["metadata"]["name"], "--ignore-not-found")

    # ---- extra processes (quotaguard itself) ------------------------------------------------

    def start_process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Process:
        """Run a process whose log joins the failure report; `stop()` stops it first."""
        if name in self.processes and self.processes[name].alive():
            raise ClusterError(f"a process named {name} is already running")
        proc = Process(name, argv, self.logs / f"{name}.log", env=env or self.env(), cwd=cwd)
        self.processes[name] = proc
        proc.start()
        return proc

    def serve_quotaguard(
        self,
        policy: Path,
        *,
        components: str = "webhook",
        args: Sequence[str] = (),
        register: bool | None = None,
        failure_policy: str | None = None,
        webhook_dir: Path = WEBHOOK_DIR,
        name: str = "quotaguard",
        timeout: float = 30,
        webhook_port: int | None = None,
    ) -> QuotaguardServer:
        """Start `python -m quotaguard serve` from this checkout against this cluster, wait until
        it listens, and (when the webhook runs, unless register=False) register its webhooks.
        `webhook_port`: a given port (replicas sharing one with `--webhook-reuse-port`)."""
        cert = self.serving_cert(f"{name}-webhook")
        webhook_port, http_port = webhook_port or free_port(), free_port()
        argv = [
            sys.executable,
            "-m",
            "quotaguard",
            "serve",
            "--policy",
            str(policy.absolute()),  # not resolve(): a symlinked policy (ConfigMap) stays one
            "--components",
            components,
            "--kubeconfig",
            str(self.kubeconfig),
            "--bind-address",
            "127.0.0.1",
            "--webhook-port",
            str(webhook_port),
            "--tls-cert-file",
            str(cert.cert_file),
            "--tls-key-file",
            str(cert.key_file),
            "--http-port",
            str(http_port),
            *_trusted_reports(args),
            *args,
        ]
        env = {
            **self.env(),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        proc = self.start_process(name, argv, env=env, cwd=REPO_ROOT)
        with_webhook = "webhook" in components.split(",")

        def listening() -> bool:
            proc.check_alive()
            if with_webhook:
                return tls_ready(webhook_port, self.pki.ca_file)
            return http_ok(f"http://127.0.0.1:{http_port}/healthz")

        wait_until(listening, timeout=timeout, interval=0.2, what=f"{name} listening")
        webhooks: list[dict[str, Any]] = []
        if with_webhook and register is not False:
            webhooks = self.register_webhooks(
                webhook_port, cert=cert, directory=webhook_dir, failure_policy=failure_policy
            )
        return QuotaguardServer(
            process=proc,
            webhook_port=webhook_port,
            http_port=http_port,
            cert=cert,
            webhooks=webhooks,
        )

    def stop_quotaguard(self, server: QuotaguardServer) -> None:
        """Unregister its webhooks first (a Fail policy would block every later create)."""
        if server.webhooks:
            self.unregister_webhooks(server.webhooks)
        server.process.stop()

    # ---- diagnostics -----------------------------------------------------------------------

    def failure_report(self, lines: int = 40) -> str:
        parts = [f"e2e cluster work directory: {self.workdir}", f"KUBECONFIG={self.kubeconfig}"]
        for name, proc in self.processes.items():
            state = "running" if proc.alive() else "stopped"
            parts.append(
                f"---- {name} ({state}) {proc.log} (last {lines} lines)\n{tail(proc.log, lines)}"
            )
        return "\n".join(parts)
