"""`stallwatch otlp-kafka`: the Collector's Kafka topic of spans mapped to observe-only events."""
