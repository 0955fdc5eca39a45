"""What a launch decides, for every adapter: readiness, stop, budget, the child, logs, diagnosis."""
