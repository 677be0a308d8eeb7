"""Kafka plumbing shared by the client, the stream jobs and the command line: client options,
the project's topics, reading a topic to its end."""
