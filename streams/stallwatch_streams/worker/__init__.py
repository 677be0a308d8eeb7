"""The stream worker: each partition's batches applied and their commands published at once; per
partition one Kafka transaction at a time commits the batches applied since the last.

`pipeline` runs the consume loop and partitions changing hands; `task` is one assigned partition
(its producer, its run states, its batches in flight and their commit loop, its expiry scan and
its commit ledger) moved through the lifecycle of `task_state`; `tasks` makes and closes them as
the group assigns and revokes; `membership` is what they share of the group; `commit` plans the
batches' writes and writes them in one transaction; `producers` starts the fencing transactional
producers; `expiry` finds a partition's idle runs; `store` holds a partition's run states and
restores them from the changelog; `batch` is the pure step from messages to commands; `health`
serves liveness; `service` wires them and owns the process's lifecycle.
"""
