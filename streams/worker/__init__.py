"""The stream worker: each partition's batch applied, published and committed in one Kafka transaction.

`pipeline` runs the consume loop and partitions changing hands; `inflight` pauses a partition
while its batch is in flight; `commit` plans a batch's writes and writes them in one transaction
(rebuilding the partition when that fails); `producers` starts the fencing transactional
producers; `expiry` finds idle runs; `store` holds the run states and restores them from the
changelog; `batch` is the pure step from messages to commands; `health` serves liveness;
`service` wires them and owns the process's lifecycle.
"""
