"""MIG layouts and GPU sharing that follow demand: layouts, the layout planner, node progress."""
