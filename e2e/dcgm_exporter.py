"""A stand-in dcgm-exporter for the kwok GPU nodes: the real exporter reads GPUs through DCGM and
there are none here, so this one serves what it would print, set by the test.

What it serves is the exporter's `/metrics` as its template writes it (v3/v4, kubernetes mode):
per field a `# HELP` and `# TYPE` line with the help text of `etc/default-counters.csv` (and
`dcp-metrics-included.csv` for the profiling field), then one sample per GPU, or per MIG GPU
instance, with the labels in the exporter's order —
`gpu, UUID, pci_bus_id, device, modelName[, GPU_I_PROFILE, GPU_I_ID], Hostname`, then the
driver version and `container, namespace, pod` (empty for a device nobody holds). Newer
exporter builds say `hostname`; a device can be served that way (`hostname_label`). Integers print
as integers and doubles with six decimals, as the exporter's `%d` / `%f`. Fields that do not
apply to a MIG instance (GPU utilisation) are left out for it, as DCGM does.

It listens on 127.0.0.1 only; state changes are taken under a lock and show on the next scrape.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DRIVER_VERSION = "550.54.15"
MODEL = "NVIDIA H100 80GB HBM3"

# (field, Prometheus type, help), in the exporter's order; `ratio`/`double` print as %f.
FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "int"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "int"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "int"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "double"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "int"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "int"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "int"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "int"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "int"),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "int",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "int",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "int",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "int"),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        "double",
    ),
)
WHOLE_GPU_ONLY = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"})
# The ECC field is off in the default counters; the exporter prints it only where enabled.
OPTIONAL = frozenset({"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"})
BASELINE: Mapping[str, float] = {
    "DCGM_FI_DEV_SM_CLOCK": 1980,
    "DCGM_FI_DEV_MEM_CLOCK": 2619,
    "DCGM_FI_DEV_GPU_TEMP": 34,
    "DCGM_FI_DEV_POWER_USAGE": 71.5,
    "DCGM_FI_DEV_GPU_UTIL": 0,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 0,
    "DCGM_FI_DEV_XID_ERRORS": 0,
    "DCGM_FI_DEV_FB_FREE": 81004,
    "DCGM_FI_DEV_FB_USED": 0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0,
}


@dataclass(frozen=True)
class Holder:
    namespace: str
    pod: str
    container: str = "main"


@dataclass(frozen=True)
class Device:
    """A whole GPU, or one MIG GPU instance of it (profile and instance id set)."""

    node: str
    gpu: int
    profile: str | None = None
    instance: int | None = None
    holder: Holder | None = None
    values: Mapping[str, float] = field(default_factory=dict)
    hostname_label: str = "Hostname"

    @property
    def key(self) -> tuple[str, int, int | None]:
        return (self.node, self.gpu, self.instance)

    def labels(self) -> list[tuple[str, str]]:
        found = [
            ("gpu", str(self.gpu)),
            ("UUID", f"GPU-{self.node}-{self.gpu}"),
            ("pci_bus_id", f"00000000:{0x07 + 8 * self.gpu:02X}:00.0"),
            ("device", f"nvidia{self.gpu}"),
            ("modelName", MODEL),
        ]
        if self.profile is not None and self.instance is not None:
            found += [("GPU_I_PROFILE", self.profile), ("GPU_I_ID", str(self.instance))]
        holder = self.holder or Holder("", "", "")
        return [
            *found,
            (self.hostname_label, self.node),
            ("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION),
            ("container", holder.container),
            ("namespace", holder.namespace),
            ("pod", holder.pod),
        ]


def whole_gpus(node: str, count: int, *, hostname_label: str = "Hostname") -> list[Device]:
    return [Device(node, gpu, hostname_label=hostname_label) for gpu in range(count)]


def mig_gpus(node: str, layout: Iterable[Mapping[str, int]]) -> list[Device]:
    """One entry per physical GPU: profile -> instances, e.g. [{"1g.10gb": 7}, {"3g.40gb": 2}].
    Instance ids count up per GPU from 1, as nvidia-smi numbers them in creation order."""
    devices = []
    for gpu, profiles in enumerate(layout):
        instance = 1
        for profile, count in profiles.items():
            for _ in range(count):
                devices.append(Device(node, gpu, profile, instance))
                instance += 1
    return devices


def _format(value: float, kind: str) -> str:
    return f"{value:f}" if kind == "double" else str(int(value))


def render(devices: Iterable[Device], *, ecc: bool = False) -> str:
    """The exposition text of one scrape."""
    devices = list(devices)
    lines: list[str] = []
    for name, prom_type, help_text, kind in FIELDS:
        if name in OPTIONAL and not ecc:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {prom_type}"]
        for device in devices:
            if name in WHOLE_GPU_ONLY and device.instance is not None:
                continue
            value = device.values.get(name, BASELINE.get(name, 0))
            labels = ",".join(f'{k}="{v}"' for k, v in device.labels())
            lines.append(f"{name}{{{labels}}} {_format(value, kind)}")
        lines.append("")
    return "\n".join(lines)


class DcgmExporter:
    """The stand-in, serving `/metrics` on 127.0.0.1:<port> from a thread.

    `set(node, gpu, FIELD=value, ...)` changes a GPU's values (every MIG instance of it with
    `instance=None`), `hold(...)` puts a pod on a device, `reset()` forgets all of it."""

    def __init__(self, devices: Iterable[Device]) -> None:
        self._initial = tuple(devices)
        self._devices: dict[tuple[str, int, int | None], Device] = {}
        self._lock = threading.Lock()
        self.ecc = False
        self.scrapes = 0
        self.reset()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = outer.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def text(self) -> str:
        with self._lock:
            self.scrapes += 1
            return render(self._devices.values(), ecc=self.ecc)

    def reset(self) -> None:
        with self._lock:
            self._devices = {d.key: d for d in self._initial}

    def _matching(self, node: str, gpu: int, instance: int | None) -> Iterator[Device]:
        found = False
        for device in self._devices.values():
            if (device.node, device.gpu) == (node, gpu) and instance in (None, device.instance):
                found = True
                yield device
        if not found:
            raise KeyError(f"no device {node}/{gpu}/{instance}")

    def set(self, node: str, gpu: int, *, instance: int | None = None, **values: float) -> None:
        with self._lock:
            for device in list(self._matching(node, gpu, instance)):
                self._devices[device.key] = replace(device, values={**device.values, **values})

    def hold(
        self,
        node: str,
        gpu: int,
        namespace: str,
        pod: str,
        *,
        instance: int | None = None,
        container: str = "main",
    ) -> None:
        with self._lock:
            for device in list(self._matching(node, gpu, instance)):
                self._devices[device.key] = replace(
                    device, holder=Holder(namespace, pod, container)
                )

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
