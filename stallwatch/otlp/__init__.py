"""OpenTelemetry in: spans and log events of agents mapped to contract events, judged observe-only."""
