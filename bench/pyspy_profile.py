"""Sampling profiles of running quotaguard processes for the scale bench, by py-spy (a
sampling profiler that reads another process's stacks from outside: nothing in quotaguard
changes; `pip install py-spy`, optional — without it the bench records no profile).

`Profile(pid, seconds).start()` samples at `RATE` Hz without pausing the process, only the
thread holding the GIL (the Python work that costs the process CPU; a thread waiting in a
socket read or a lock is not counted); `.summary()` waits for it and gives the functions by
share of the samples: `self` (the function was on top, running) and `inclusive` (anywhere in
the stack), file paths cut to the package. `samples / RATE` is about the CPU seconds of
Python work in the window.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

RATE = 25  # samples per second: enough for a minute's profile, ~1% of a core for py-spy
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^():]+)(?::\d+)?\)$")


def available() -> bool:
    return shutil.which("py-spy") is not None


def _short(frame: str) -> str:
    match = FRAME.match(frame)
    if match is None:
        return frame
    file = match["file"]
    if "/site-packages/" in file:
        file = file.rsplit("/site-packages/", 1)[1]
    elif "/quotaguard/" in file:
        file = "quotaguard/" + file.rsplit("/quotaguard/", 1)[1]
    elif "/lib/python3" in file:
        file = file.rsplit("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{match['function']} ({file})"


def summarize(collapsed: str, top: int = 15) -> dict[str, Any]:
    """Shares of the samples in py-spy's raw (collapsed-stack) output, one stack a line."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f and not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread ")]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(100 * n / total, 1)) for name, n in counter.most_common(top)]

    return {"samples": total, "self_percent": shares(own), "inclusive_percent": shares(anywhere)}


class Profile:
    def __init__(self, pid: int, seconds: float, directory: Path | None = None) -> None:
        self.pid, self.seconds = pid, seconds
        self.directory = directory or Path(tempfile.mkdtemp(prefix="pyspy-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.output = self.directory / f"profile-{pid}.txt"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Profile:
        if available():
            argv = ["py-spy", "record", "--pid", str(self.pid), "--format", "raw"]
            argv += ["--duration", str(int(self.seconds)), "--rate", str(RATE)]
            argv += ["--nonblocking", "--gil"]
            self.process = subprocess.Popen(
                [*argv, "--output", str(self.output)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return self

    def summary(self) -> dict[str, Any] | None:
        if self.process is None:
            return None
        try:
            self.process.wait(timeout=self.seconds + 60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return None
        if not self.output.exists():
            return None
        return {"file": str(self.output), **summarize(self.output.read_text())}
