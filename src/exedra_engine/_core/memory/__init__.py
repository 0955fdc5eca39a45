"""The memory estimate, what the planner decides from it, the measured figures."""
