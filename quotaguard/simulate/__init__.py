"""The trace simulator: a workload trace replayed through admission and the quota controller's
planning cycle, arm by arm, against a simulated cluster."""

from quotaguard.simulate.simulation import Simulation, simulate
from quotaguard.simulate.simulation_report import render_text, result_json
from quotaguard.simulate.trace import Trace, TraceInvalid, load_trace

__all__ = [
    "Simulation",
    "Trace",
    "TraceInvalid",
    "load_trace",
    "render_text",
    "result_json",
    "simulate",
]
