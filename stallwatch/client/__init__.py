"""The client for agent runtimes: on Kafka, or in-process with the same calls. No worker code here."""

from stallwatch.client.embedded import EmbeddedClient
from stallwatch.client.kafka import KafkaClient
from stallwatch.client.run import CallDecision, Client, Run
from stallwatch.client.sync import SyncClient, SyncRun

__all__ = ["CallDecision", "Client", "EmbeddedClient", "KafkaClient", "Run", "SyncClient", "SyncRun"]
