"""The stream worker: each partition's batch applied, published and committed in one Kafka transaction.

`pipeline` consumes, applies and commits; `store` holds the run states and restores them from the
changelog; `batch` is the pure step from messages to commands; `health` serves liveness;
`service` wires them and owns the process's lifecycle.
"""
