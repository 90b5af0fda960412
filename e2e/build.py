"""Build and cache the real control plane the e2e suite runs against.

No container engine and no binary downloads are available, so the upstream components are
compiled from their Go modules with the machine's Go, the way envtest would otherwise fetch
them. Everything lands in a cache outside the repository; a component is rebuilt only when its
version stamp (versions, Go version, build flags) changes.

    python -m e2e.build            # build what is missing, print the toolchain
    python -m e2e.build --check    # exit 1 when something is missing, build nothing
    python -m e2e.build --force    # rebuild everything
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

K8S_VERSION = "v1.36.3"
STAGING_VERSION = "v0.36.3"
# The staging modules k8s.io/kubernetes replaces with ./staging paths in 1.36.
STAGING_MODULES: tuple[str, ...] = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
    "streaming",
)
# kubectl is built too (about 40 s more on top of the three servers, it shares most packages)
# so the client matches the server instead of whatever version happens to be on PATH.
K8S_COMMANDS: tuple[str, ...] = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
)
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
KUEUE_VERSION = "v0.17.0"
JOBSET_VERSION = "v0.10.1"
GO_BUILD_PARALLELISM = "2"
# Helm, for the chart's lint/template tests and its install/upgrade into the e2e API server.
HELM_VERSION = "v3.22.0"
# Prometheus (and promtool, for `promtool test rules`) for the telemetry e2e tests. Module builds
# carry no web UI assets (the HTTP API works); `remove_all_sd` leaves out the cloud service
# discoveries the harness never uses (static targets only), which halves the compile work.
PROMETHEUS_VERSION = "v0.316.0"
PROMETHEUS_COMMANDS: tuple[str, ...] = ("prometheus", "promtool")
PROMETHEUS_TAGS = "remove_all_sd"

# Volcano's module (and volcano.sh/apis) is refused by the module proxy, so its CRDs are the
# minimal, schema-less definitions kept next to this file (group, kinds, scope and status
# subresource as upstream; no field validation).
VOLCANO_CRD_FILE = Path(__file__).resolve().parent / "crds" / "volcano.yaml"

# The CRDs of the workload kinds Kueue integrates, from their modules at the exact versions
# Kueue v0.17.0's go.mod builds against (the proxy serves those, and Kueue's build downloads
# them anyway). Optional, and installed only in clusters started with workload_crds=True: they
# are ~11 MB of schema that every other cluster would pay for at start. training-operator's
# mpijobs.kubeflow.org is the v1 API; Kueue integrates v2beta1, from mpi-operator.
# (directory, module, version, files in the module)
WORKLOAD_CRDS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (
        "lws",
        "sigs.k8s.io/lws",
        "v0.8.0",
        ("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",),
    ),
    (
        "kuberay",
        "github.com/ray-project/kuberay/ray-operator",
        "v1.6.0",
        tuple(
            f"config/crd/bases/ray.io_{k}.yaml" for k in ("rayjobs", "rayclusters", "rayservices")
        ),
    ),
    (
        "training-operator",
        "github.com/kubeflow/training-operator",
        "v1.9.3",
        tuple(
            f"manifests/base/crds/kubeflow.org_{k}.yaml"
            for k in ("pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs")
        ),
    ),
    (
        "mpi-operator",
        "github.com/kubeflow/mpi-operator",
        "v0.8.0",
        ("manifests/base/kubeflow.org_mpijobs.yaml",),
    ),
    (
        "trainer",
        "github.com/kubeflow/trainer/v2",
        "v2.2.0",
        tuple(
            f"manifests/base/crds/trainer.kubeflow.org_{k}.yaml"
            for k in ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
        ),
    ),
    (
        "appwrapper",
        "github.com/project-codeflare/appwrapper",
        "v1.2.0",
        ("config/crd/bases/workload.codeflare.dev_appwrappers.yaml",),
    ),
)
# Kueue's own webhook registrations (the kustomize base its release renders, before the
# `kueue-` name prefix), for the e2e tests that run Kueue with its webhooks on.
KUEUE_WEBHOOK_SUBDIR = "config/components/webhook"


def cache_dir() -> Path:
    """The cache root: $QUOTAGUARD_E2E_CACHE or ~/.cache/quotaguard-e2e."""
    configured = os.environ.get("QUOTAGUARD_E2E_CACHE")
    if configured:
        return Path(configured).expanduser().resolve()
    return Path.home() / ".cache" / "quotaguard-e2e"


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Paths to everything a test cluster needs."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kwok: Path
    kubectl: Path
    kwok_stages: Path
    crd_dirs: tuple[Path, ...]
    # Optional parts (not in missing()): each workload kind's CRDs, Kueue's webhook manifests.
    workload_crd_dirs: tuple[Path, ...] = ()
    kueue_webhook_dir: Path | None = None

    def missing(self) -> list[str]:
        paths = [
            self.kube_apiserver,
            self.kube_controller_manager,
            self.kube_scheduler,
            self.etcd,
            self.kwok,
            self.kubectl,
            self.kwok_stages,
            *self.crd_dirs,
        ]
        return [str(p) for p in paths if not p.exists()]


class BuildError(RuntimeError):
    """A step of the build failed; the message says which and where its log is."""


# --------------------------------------------------------------------------------------------
# Layout and stamps


class Layout:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.modules = root / "modules"
        self.stamps = root / "stamps"
        self.logs = root / "logs"
        self.crds = root / "crds"
        self.stages = root / "stages" / f"kwok-{KWOK_VERSION}.yaml"

    def binary(self, name: str) -> Path:
        return self.bin / name

    def stamp_ok(self, name: str, key: str, *outputs: Path) -> bool:
        stamp = self.stamps / name
        return stamp.exists() and stamp.read_text() == key and all(p.exists() for p in outputs)

    def write_stamp(self, name: str, key: str) -> None:
        self.stamps.mkdir(parents=True, exist_ok=True)
        (self.stamps / name).write_text(key)


def go_version() -> str:
    out = subprocess.run(["go", "env", "GOVERSION"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def stamp_key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env["GOTOOLCHAIN"] = "local"
    env.setdefault("GOFLAGS", "-buildvcs=false")
    return env


def run_logged(
    argv: Sequence[str], *, cwd: Path, log: Path, env: dict[str, str] | None = None
) -> None:
    """Run a command with output appended to a log; raise BuildError with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"$ (cd {cwd} && {' '.join(argv)})\n")
        fh.flush()
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env=env or go_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise BuildError(
            f"{' '.join(argv[:3])}... failed (exit {proc.returncode}); log {log}:\n{tail}"
        )


def go_build_argv(verb: str, ldflags: str = "-s -w") -> list[str]:
    """`go build` / `go install` with the flags every binary here is built with."""
    return ["go", verb, "-p", GO_BUILD_PARALLELISM, "-trimpath", "-ldflags", ldflags]


def go_install(layout: Layout, target: str, *, log: Path) -> None:
    """`go install module/cmd@version` into the layout's bin directory."""
    env = go_env()
    env["GOBIN"] = str(layout.bin)
    layout.bin.mkdir(parents=True, exist_ok=True)
    run_logged([*go_build_argv("install"), target], cwd=layout.root, log=log, env=env)


def module_dir(module: str, version: str, *, cwd: Path) -> Path:
    """Download MODULE@VERSION into the module cache and return its directory."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd,
        env=go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    info: dict[str, str] = json.loads(proc.stdout) if proc.stdout.strip() else {}
    if proc.returncode != 0 or "Dir" not in info:
        raise BuildError(
            f"go mod download {module}@{version}: {info.get('Error') or proc.stderr.strip()}"
        )
    return Path(info["Dir"])


# --------------------------------------------------------------------------------------------
# Steps


def version_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


def k8s_go_mod() -> str:
    replaces = "".join(f"\tk8s.io/{m} => k8s.io/{m} {STAGING_VERSION}\n" for m in STAGING_MODULES)
    return (
        f"module quotaguard.e2e/k8s\n\ngo 1.26\n\ngodebug default=go1.26\n\n"
        f"require k8s.io/kubernetes {K8S_VERSION}\n\nreplace (\n{replaces})\n"
    )


def build_kubernetes(layout: Layout, *, commands: Sequence[str], force: bool) -> None:
    """kube-apiserver & co. from a helper module, all in one `go build` to share compile work."""
    outputs = [layout.binary(c) for c in commands]
    ldflags = version_ldflags(K8S_VERSION)
    key = stamp_key(K8S_VERSION, go_version(), ldflags, *sorted(commands))
    if not force and layout.stamp_ok("kubernetes", key, *outputs):
        return
    moddir = layout.modules / f"k8s-{K8S_VERSION}"
    moddir.mkdir(parents=True, exist_ok=True)
    if not (moddir / "go.mod").exists():
        (moddir / "go.mod").write_text(k8s_go_mod())
    log = layout.logs / "build-kubernetes.log"
    pkgs = [f"k8s.io/kubernetes/cmd/{c}" for c in commands]
    run_logged(["go", "get", *(f"{p}@{K8S_VERSION}" for p in pkgs)], cwd=moddir, log=log)
    layout.bin.mkdir(parents=True, exist_ok=True)
    run_logged(
        [*go_build_argv("build", ldflags), "-o", str(layout.bin) + os.sep, *pkgs],
        cwd=moddir,
        log=log,
    )
    layout.write_stamp("kubernetes", key)


def build_etcd(layout: Layout, *, force: bool) -> None:
    """etcd from its server module, in a tools module of its own (its go.mod has replaces)."""
    out = layout.binary("etcd")
    key = stamp_key(ETCD_VERSION, go_version())
    if not force and layout.stamp_ok("etcd", key, out):
        return
    moddir = layout.modules / f"etcd-{ETCD_VERSION}"
    moddir.mkdir(parents=True, exist_ok=True)
    if not (moddir / "go.mod").exists():
        (moddir / "go.mod").write_text("module quotaguard.e2e/etcd\n\ngo 1.26\n")
    log = layout.logs / "build-etcd.log"
    run_logged(["go", "get", f"go.etcd.io/etcd/server/v3@{ETCD_VERSION}"], cwd=moddir, log=log)
    argv = [*go_build_argv("build"), "-o", str(out), "go.etcd.io/etcd/server/v3"]
    run_logged(argv, cwd=moddir, log=log)
    layout.write_stamp("etcd", key)


def build_kwok(layout: Layout, *, force: bool) -> None:
    out = layout.binary("kwok")
    key = stamp_key(KWOK_VERSION, go_version())
    if not force and layout.stamp_ok("kwok", key, out):
        return
    go_install(
        layout, f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}", log=layout.logs / "build-kwok.log"
    )
    layout.write_stamp("kwok", key)


def build_kueue(layout: Layout, *, force: bool) -> list[str]:
    """Optional: Kueue's controller, for the e2e tests that watch it admit workloads under
    quotaguard's quotas. A failure is returned (and those tests skip), never raised."""
    out = layout.binary("kueue")
    key = stamp_key(KUEUE_VERSION, go_version())
    if not force and layout.stamp_ok("kueue", key, out):
        return []
    target = f"sigs.k8s.io/kueue/cmd/kueue@{KUEUE_VERSION}"
    try:
        go_install(layout, target, log=layout.logs / "build-kueue.log")
    except BuildError as err:
        return [f"kueue controller {KUEUE_VERSION}: {err}"]
    layout.write_stamp("kueue", key)
    return []


def prometheus_ldflags(version: str) -> str:
    """Prometheus's module version v0.3XY.Z is release 3.XY.Z; stamp it so `--version` says so."""
    minor_digits = version.lstrip("v").split(".")
    release = f"{int(minor_digits[1]) // 100}.{int(minor_digits[1]) % 100}.{minor_digits[2]}"
    return f"-s -w -X github.com/prometheus/common/version.Version={release}"


def build_prometheus(layout: Layout, *, force: bool) -> None:
    """prometheus and promtool in one `go install` (same module and version: shared compiles)."""
    outputs = [layout.binary(c) for c in PROMETHEUS_COMMANDS]
    ldflags = prometheus_ldflags(PROMETHEUS_VERSION)
    key = stamp_key(PROMETHEUS_VERSION, go_version(), ldflags, PROMETHEUS_TAGS)
    if not force and layout.stamp_ok("prometheus", key, *outputs):
        return
    env = go_env()
    env["GOBIN"] = str(layout.bin)
    layout.bin.mkdir(parents=True, exist_ok=True)
    module = "github.com/prometheus/prometheus"
    targets = [f"{module}/cmd/{c}@{PROMETHEUS_VERSION}" for c in PROMETHEUS_COMMANDS]
    argv = [*go_build_argv("install", ldflags), "-tags", PROMETHEUS_TAGS, *targets]
    run_logged(argv, cwd=layout.root, log=layout.logs / "build-prometheus.log", env=env)
    layout.write_stamp("prometheus", key)


def prometheus_binaries(layout: Layout | None = None) -> tuple[Path, Path] | None:
    """(prometheus, promtool) when both were built."""
    layout = layout or Layout(cache_dir())
    found = tuple(layout.binary(c) for c in PROMETHEUS_COMMANDS)
    return (found[0], found[1]) if all(p.exists() for p in found) else None


def kueue_binary(layout: Layout | None = None) -> Path | None:
    """The optional Kueue controller binary, when it was built."""
    found = (layout or Layout(cache_dir())).binary("kueue")
    return found if found.exists() else None


def helm_ldflags(module: Path) -> str:
    """The version stamps helm's Makefile sets: its release, and the Kubernetes version of its
    client-go, which `helm template` and `helm lint` assume without a cluster."""
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"]
    for line in (module / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/client-go":
            minor = parts[1].lstrip("v").split(".")[1]
            for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
                flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
    return " ".join(flags)


def build_helm(layout: Layout, *, force: bool) -> list[str]:
    """Optional: the helm CLI from its Go module (`helm version` reports the release). A
    failure is returned (the chart tests then skip, except under CI), never raised."""
    out = layout.binary("helm")
    try:
        ldflags = helm_ldflags(module_dir("helm.sh/helm/v3", HELM_VERSION, cwd=layout.root))
    except BuildError as err:
        return [f"helm {HELM_VERSION}: {err}"]
    key = stamp_key(HELM_VERSION, go_version(), ldflags)
    if not force and layout.stamp_ok("helm", key, out):
        return []
    env = go_env()
    env["GOBIN"] = str(layout.bin)
    layout.bin.mkdir(parents=True, exist_ok=True)
    argv = [*go_build_argv("install", ldflags), f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"]
    try:
        run_logged(argv, cwd=layout.root, log=layout.logs / "build-helm.log", env=env)
    except BuildError as err:
        return [f"helm {HELM_VERSION}: {err}"]
    layout.write_stamp("helm", key)
    return []


def helm_binary(layout: Layout | None = None) -> Path | None:
    """The helm binary, when it was built."""
    found = (layout or Layout(cache_dir())).binary("helm")
    return found if found.exists() else None


def concatenate_yaml(files: Iterable[Path]) -> str:
    docs = [f.read_text().strip() for f in files]
    return "\n---\n".join(d.removeprefix("---").strip() for d in docs if d) + "\n"


def write_kwok_stages(layout: Layout, *, force: bool) -> None:
    """kwok has no built-in stages: node fast + lease heartbeat, pod ready + delete."""
    key = stamp_key(KWOK_VERSION, "node/fast,node/heartbeat-with-lease,pod-ready,pod-delete")
    if not force and layout.stamp_ok("kwok-stages", key, layout.stages):
        return
    stage = module_dir("sigs.k8s.io/kwok", KWOK_VERSION, cwd=layout.root) / "kustomize" / "stage"
    files = [
        *sorted((stage / "node" / "fast").glob("*.yaml")),
        *sorted((stage / "node" / "heartbeat-with-lease").glob("*.yaml")),
        stage / "pod" / "fast" / "pod-ready.yaml",
        # Without a kubelet a deleted pod stays Terminating; kwok's delete stage finishes it.
        stage / "pod" / "fast" / "pod-delete.yaml",
    ]
    files = [f for f in files if f.name != "kustomization.yaml"]
    layout.stages.parent.mkdir(parents=True, exist_ok=True)
    layout.stages.write_text(concatenate_yaml(files))
    layout.write_stamp("kwok-stages", key)


def crd_dirs(layout: Layout) -> tuple[Path, ...]:
    return (
        layout.crds / f"kueue-{KUEUE_VERSION}",
        layout.crds / f"jobset-{JOBSET_VERSION}",
        layout.crds / "volcano",
    )


def copy_crds(layout: Layout, *, force: bool) -> list[str]:
    """Copy CRD manifests out of the module cache; return the optional ones that failed."""
    kueue_dir, jobset_dir, volcano_dir = crd_dirs(layout)
    sources: list[tuple[Path, str, str, str, bool]] = [
        (kueue_dir, "sigs.k8s.io/kueue", KUEUE_VERSION, "config/components/crd/bases", True),
        (jobset_dir, "sigs.k8s.io/jobset", JOBSET_VERSION, "config/components/crd/bases", False),
    ]
    failed: list[str] = []
    for dest, module, version, subdir, required in sources:
        key = stamp_key(module, version, subdir)
        if not force and layout.stamp_ok(dest.name, key, dest):
            continue
        try:
            src = module_dir(module, version, cwd=layout.root) / subdir
        except BuildError as err:
            if required:
                raise
            failed.append(f"{module}@{version}: {err}")
            continue
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for f in sorted(src.glob("*.yaml")):
            if f.name != "kustomization.yaml":
                shutil.copyfile(f, dest / f.name)
                (dest / f.name).chmod(0o644)
        layout.write_stamp(dest.name, key)
    volcano_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(VOLCANO_CRD_FILE, volcano_dir / VOLCANO_CRD_FILE.name)
    return failed


def workload_crd_dirs(layout: Layout) -> tuple[Path, ...]:
    return tuple(
        layout.root / "workload-crds" / f"{name}-{version}" for name, _, version, _ in WORKLOAD_CRDS
    )


def kueue_webhook_dir(layout: Layout) -> Path:
    return layout.root / "kueue" / f"webhook-{KUEUE_VERSION}"


def copy_optional_manifests(layout: Layout, *, force: bool) -> list[str]:
    """Copy the workload CRDs and Kueue's webhook manifests out of the module cache; return
    what failed (those tests skip), never raise."""
    sources = [
        (dest, module, version, files)
        for dest, (_, module, version, files) in zip(
            workload_crd_dirs(layout), WORKLOAD_CRDS, strict=True
        )
    ]
    webhook_files = ("manifests.yaml", "service.yaml", "kustomization.yaml", "kustomizeconfig.yaml")
    sources.append(
        (
            kueue_webhook_dir(layout),
            "sigs.k8s.io/kueue",
            KUEUE_VERSION,
            tuple(f"{KUEUE_WEBHOOK_SUBDIR}/{f}" for f in webhook_files),
        )
    )
    failed: list[str] = []
    for dest, module, version, files in sources:
        key = stamp_key(module, version, *files)
        stamp = f"{dest.parent.name}-{dest.name}"
        if not force and layout.stamp_ok(stamp, key, dest):
            continue
        try:
            src = module_dir(module, version, cwd=layout.root)
            missing = [f for f in files if not (src / f).is_file()]
            if missing:
                raise BuildError(f"{module}@{version} has no {', '.join(missing)}")
        except BuildError as err:
            failed.append(f"{module}@{version}: {err}")
            continue
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for f in files:
            shutil.copyfile(src / f, dest / Path(f).name)
            (dest / Path(f).name).chmod(0o644)
        layout.write_stamp(stamp, key)
    return failed


# --------------------------------------------------------------------------------------------
# Entry points


def toolchain(layout: Layout | None = None) -> Toolchain:
    """Where the toolchain is (or would be); check `.missing()` before using it."""
    layout = layout or Layout(cache_dir())
    override = os.environ.get("QUOTAGUARD_E2E_KUBECTL")
    kubectl = Path(override) if override else layout.binary("kubectl")
    return Toolchain(
        kube_apiserver=layout.binary("kube-apiserver"),
        kube_controller_manager=layout.binary("kube-controller-manager"),
        kube_scheduler=layout.binary("kube-scheduler"),
        etcd=layout.binary("etcd"),
        kwok=layout.binary("kwok"),
        kubectl=kubectl,
        kwok_stages=layout.stages,
        crd_dirs=crd_dirs(layout),
        workload_crd_dirs=workload_crd_dirs(layout),
        kueue_webhook_dir=kueue_webhook_dir(layout),
    )


def ensure_toolchain(*, force: bool = False, log: bool = True) -> Toolchain:
    """Build whatever is missing or stale and return the toolchain. Raises BuildError."""
    layout = Layout(cache_dir())
    layout.root.mkdir(parents=True, exist_ok=True)
    if shutil.which("go") is None:
        raise BuildError("no `go` on PATH: the e2e toolchain needs Go >= 1.26")
    timings: dict[str, float] = {}

    def step(name: str, fn: Callable[[], object]) -> None:
        start = time.monotonic()
        if log:
            print(f"[e2e.build] {name} ...", file=sys.stderr, flush=True)
        fn()
        timings[name] = round(time.monotonic() - start, 1)
        if log:
            print(f"[e2e.build] {name}: {timings[name]}s", file=sys.stderr, flush=True)

    failed: list[str] = []
    step("crds", lambda: failed.extend(copy_crds(layout, force=force)))
    step(
        "workload crds (optional)",
        lambda: failed.extend(copy_optional_manifests(layout, force=force)),
    )
    step("kwok-stages", lambda: write_kwok_stages(layout, force=force))
    step("etcd", lambda: build_etcd(layout, force=force))
    step("kwok", lambda: build_kwok(layout, force=force))
    step("kubernetes", lambda: build_kubernetes(layout, commands=K8S_COMMANDS, force=force))
    step("kueue (optional)", lambda: failed.extend(build_kueue(layout, force=force)))
    step("helm (optional)", lambda: failed.extend(build_helm(layout, force=force)))
    step("prometheus", lambda: build_prometheus(layout, force=force))
    record = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "go": go_version(),
        "nproc": os.cpu_count(),
        "seconds": timings,
        "optional_failures": failed,
    }
    with (layout.root / "build-times.jsonl").open("a") as fh:
        fh.write(json.dumps(record) + "\n")
    for f in failed:
        print(f"[e2e.build] optional step skipped: {f}", file=sys.stderr)
    return toolchain(layout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="build nothing; exit 1 if missing")
    parser.add_argument("--force", action="store_true", help="rebuild even when stamps match")
    parser.add_argument(
        "--optional",
        action="store_true",
        help="without Go on PATH, say so and exit 0 (the suite then skips e2e); "
        "under CI=true a missing Go still fails",
    )
    args = parser.parse_args(argv)
    if args.optional and shutil.which("go") is None and os.environ.get("CI") != "true":
        print("[e2e.build] no `go` on PATH: e2e tests will be skipped", file=sys.stderr)
        return 0
    if args.check:
        tc = toolchain()
        missing = tc.missing()
        if prometheus_binaries() is None:
            missing.append(f"prometheus/promtool {PROMETHEUS_VERSION} in {Layout(cache_dir()).bin}")
        for m in missing:
            print(f"missing: {m}", file=sys.stderr)
        print(json.dumps(dataclasses.asdict(tc), default=str, indent=2))
        return 1 if missing else 0
    start = time.monotonic()
    try:
        tc = ensure_toolchain(force=args.force)
    except BuildError as err:
        print(f"[e2e.build] FAILED: {err}", file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(tc), default=str, indent=2))
    print(
        f"[e2e.build] done in {time.monotonic() - start:.1f}s; cache {cache_dir()}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
