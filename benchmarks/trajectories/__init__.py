"""Public SWE-bench agent trajectories, converted to stallwatch events and replayed."""
