"""`mutmut run`, with a wall-clock bound per mutant WALL_FACTOR times mutmut's own.

mutmut bounds each mutant twice: CPU seconds (2 x timeout_multiplier x (its tests' time + 1),
which catches endless loops) and wall seconds (half that). Run at nice 19 on a shared machine,
a mutant's tests get a small share of a core, and a run may be stopped and resumed: the wall
bound then fires on mutants that are merely waiting, and mutmut counts them as caught. The
CPU bound alone decides here, unless a mutant hangs without using CPU for WALL_FACTOR times
as long.
"""

from __future__ import annotations

import os

import mutmut.workers.isolation as isolation
from mutmut.__main__ import cli

FACTOR = float(os.environ.get("WALL_FACTOR", "20"))
_register = isolation.register_timeout


def _patient(pid: int, timeout_s: float) -> None:
    _register(pid, timeout_s * FACTOR)


isolation.register_timeout = _patient

if __name__ == "__main__":
    cli(prog_name="mutmut")
