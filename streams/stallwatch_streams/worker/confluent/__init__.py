"""The decision worker's Kafka I/O on confluent-kafka (librdkafka), for the group transaction
model (docs/tenants.md, docs/exactly-once.md): every contact with `confluent_kafka` is in this
package, as faust keeps every contact with aiokafka in one driver module.

- `options`: the librdkafka configuration from the settings.
- `consumer`: a tenant group's consumer, driven by a thread of its own, and each tenant's view of
  it in the shape the pipeline uses of aiokafka's consumer.
- `transactions`: a tenant group's one transactional producer, committing every task's batches
  of a commit interval in one transaction fenced by the group's generation (KIP-447).
- `ahead`: the worker's one idempotent producer of commands published ahead.
"""
