"""The stream jobs: the decision worker (`streams.worker`) and the fleet app (`streams.fleet`)."""
