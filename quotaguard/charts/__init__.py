"""Inline-SVG charts shared by the reports and the simulator."""
