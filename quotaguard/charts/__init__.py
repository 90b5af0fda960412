"""Inline-SVG charts shared by the reports and the simulator."""

from quotaguard.charts.svg import Line, axis_fractions, color, line_chart, stacked_chart

__all__ = ["Line", "axis_fractions", "color", "line_chart", "stacked_chart"]
