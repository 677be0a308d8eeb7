#!/usr/bin/env bash
# A local three-node Apache Kafka cluster (KRaft, each node a broker and a controller) with a
# production's replication: Kafka's internal topics on 3 replicas with min ISR 2, and the worker's
# own defaults (STALLWATCH_REPLICATION_FACTOR 3, STALLWATCH_MIN_INSYNC_REPLICAS 2) apply as they are.
# Each node is deploy/kafka/kafka.sh on its own ports: node N serves clients on
# STALLWATCH_CLUSTER_PORT + 10*(N-1) (default 9200, 9210, 9220) and its controller one above.
#
#   cluster.sh up|fresh|down|status|bootstrap  the whole cluster (fresh: from empty storage)
#   cluster.sh kill|stop|cont|start|pid N    one node: SIGKILL, SIGSTOP (frozen), SIGCONT, start again
#   cluster.sh stop-clean N                  one node shut down cleanly (SIGTERM: it hands its
#                                            leaderships over first), as in a rolling restart
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base="${STALLWATCH_CLUSTER_PORT:-9200}"
NODES="1 2 3"
# A lost node is fenced, and its partitions move, 5-6 s after its last heartbeat instead of
# Kafka's 7-9 s: verdicts come back within 10 s of a broker's loss (docs/decisions.md, "A broker
# fails"). A node that pauses longer (a GC pause, a frozen VM) is fenced too and rejoins as a
# follower at its next heartbeat.
export STALLWATCH_KAFKA_BROKER_SESSION_MS="${STALLWATCH_KAFKA_BROKER_SESSION_MS:-6000}"

port_of() { echo $((base + 10 * ($1 - 1))); }
voters() {
  local list=""
  for n in $NODES; do list="$list${list:+,}$n@127.0.0.1:$(( $(port_of "$n") + 1 ))"; done
  echo "$list"
}
bootstrap() {
  local list=""
  for n in $NODES; do list="$list${list:+,}127.0.0.1:$(port_of "$n")"; done
  echo "$list"
}
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$(port_of "$1")") 2>/dev/null; }
pid_of() { cat "$root/.cache/kafka-data/$(port_of "$1")/kafka.pid"; }

node() {  # node N COMMAND: kafka.sh COMMAND as node N
  local n=$1
  shift
  STALLWATCH_KAFKA_PORT="$(port_of "$n")" STALLWATCH_KAFKA_NODE_ID="$n" \
    STALLWATCH_KAFKA_VOTERS="$(voters)" STALLWATCH_KAFKA_INTERNAL_REPLICAS=3 \
    STALLWATCH_KAFKA_CLUSTER_ID="$(cluster_id)" STALLWATCH_KAFKA_NO_WAIT=1 \
    STALLWATCH_KAFKA_CONTROLLER_LOG_LEVEL="${STALLWATCH_KAFKA_CONTROLLER_LOG_LEVEL:-INFO}" "$here/kafka.sh" "$@"
}

cluster_id() {
  local file="$root/.cache/kafka-data/cluster-$base.id"
  if [ ! -f "$file" ]; then
    mkdir -p "$(dirname "$file")"
    STALLWATCH_KAFKA_PORT="$base" "$here/kafka.sh" uuid 2>/dev/null | tail -1 > "$file"
  fi
  cat "$file"
}

wait_for() {  # until every node named answers, up to 3 minutes
  for _ in $(seq 1 360); do
    local all=1
    for n in "$@"; do answers "$n" || all=0; done
    if [ "$all" = 1 ]; then return; fi
    sleep 0.5
  done
  echo "cluster: nodes $* not answering after 180 s" >&2
  exit 1
}

up() {
  STALLWATCH_KAFKA_PORT="$base" "$here/kafka.sh" jars
  cluster_id >/dev/null
  for n in $NODES; do answers "$n" || node "$n" up; done
  wait_for $NODES
  echo "cluster: up on $(bootstrap)" >&2
}

# `up` from empty storage when no node runs (kafka.sh fresh); as `up` when any does: a node wiped
# beside live ones would rejoin the quorum with none of its metadata.
fresh() {
  for n in $NODES; do
    if answers "$n" || { [ -f "$root/.cache/kafka-data/$(port_of "$n")/kafka.pid" ] && kill -0 "$(pid_of "$n")" 2>/dev/null; }; then
      up
      return
    fi
  done
  STALLWATCH_KAFKA_PORT="$base" "$here/kafka.sh" jars
  for n in $NODES; do node "$n" fresh; done
  wait_for $NODES
  echo "cluster: up from empty storage on $(bootstrap)" >&2
}

case "${1:-}" in
  up) up ;;
  fresh) fresh ;;
  down) for n in $NODES; do node "$n" down; done ;;
  status) for n in $NODES; do if answers "$n"; then echo "node $n: answering"; else echo "node $n: down"; fi; done ;;
  bootstrap) bootstrap ;;
  kill) kill -9 "$(pid_of "$2")" ;;
  stop) kill -STOP "$(pid_of "$2")" ;;
  cont) kill -CONT "$(pid_of "$2")" ;;
  start) node "$2" up; wait_for "$2" ;;
  stop-clean) node "$2" down ;;
  pid) pid_of "$2" ;;
  *) sed -n '8,11p' "$0" >&2; exit 2 ;;
esac
