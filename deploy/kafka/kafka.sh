#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft) from Maven Central jars: `kafka.sh up|fresh|down|status`.
# Idempotent: `up` does nothing when a broker already answers on the port.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
port="${STALLWATCH_KAFKA_PORT:-9092}"
controller_port="${STALLWATCH_KAFKA_CONTROLLER_PORT:-$((port + 1))}"
# One node of a cluster (deploy/kafka/cluster.sh sets these): its id, the controller quorum, the
# replication of Kafka's internal topics (min ISR 2 once there are more than one) and the
# cluster id every node is formatted with. Alone, the node is the whole cluster.
node_id="${STALLWATCH_KAFKA_NODE_ID:-1}"
voters="${STALLWATCH_KAFKA_VOTERS:-1@127.0.0.1:$controller_port}"
internal_replicas="${STALLWATCH_KAFKA_INTERNAL_REPLICAS:-1}"
internal_min_isr=$(( internal_replicas > 1 ? 2 : 1 ))
# How long the controller waits for a silent broker before it fences it and moves its leaders
# (Kafka's default 9000, heartbeats every 2000); a cluster's nodes set it shorter.
broker_session_ms="${STALLWATCH_KAFKA_BROKER_SESSION_MS:-9000}"
broker_heartbeat_ms=$(( broker_session_ms >= 9000 ? 2000 : broker_session_ms / 6 ))
# A second listener that tests reach only through a proxy they can cut (tests/kafka_harness.py):
# it listens on port+4 and tells clients to connect to port+5, where the proxy listens, so every
# connection of a client bootstrapped on port+5 (metadata, fetches, transactions, heartbeats)
# passes the proxy. Everything else uses the PLAINTEXT listener on the port itself. (port+2 and
# port+3 are a second broker's, which tests/client/test_kafka_broker_away.py starts and stops.)
cuttable_port=$((port + 4))
proxy_port=$((port + 5))
cache="${STALLWATCH_KAFKA_CACHE:-$root/.cache/kafka}"
# STALLWATCH_KAFKA_HEAP: the broker's heap (768m; 2g for a thousand tenants' topics, benchmarks/tenants_bench.py).
libs="$cache/libs"
data="$root/.cache/kafka-data/$port"
# STALLWATCH_KAFKA_LOG_ROOT: where the node keeps its partitions, under <root>/<port> (by default
# beside its config in .cache/kafka-data). A tmpfs (/dev/shm/...) keeps the disk out of a
# benchmark of the worker: on this VM's disk the broker's appends stalled for up to 18 s now and
# then (benchmarks/README.md, "Many tenants").
logs="${STALLWATCH_KAFKA_LOG_ROOT:-$root/.cache/kafka-data}/$port/logs"
# STALLWATCH_KAFKA_SECURE=1: the same node with SASL and authorization on, as a shared cluster
# runs: clients authenticate on the port (SASL_PLAINTEXT: PLAIN with the users below, or
# OAUTHBEARER with Kafka's unsecured JWS tokens, whose `sub` is the principal: anyone can claim
# any principal with them, so for a local test broker only), KRaft's StandardAuthorizer denies
# what no ACL allows, and only User:admin (the broker itself, and the operator's tools) is a super
# user. PLAIN rather than SCRAM: its users live in the broker's config, so a node starts with no
# credential bootstrapping; the ACLs, not the mechanism, are what the tests exercise. The
# controller listener authenticates too (PLAIN, the admin alone): a controller answers admin
# requests (CreateAcls among them, for `--bootstrap-controller`), so an unauthenticated one would
# let any local process grant itself everything. Passwords are made at the first start (and for
# a user added later) into $data/passwords (name=password lines) and $data/admin.properties (the
# admin's client settings, for Kafka's own tools); these and server.properties, which holds every
# password, are readable by their owner only.
secure="${STALLWATCH_KAFKA_SECURE:-0}"
USERS="admin stallwatch-worker stallwatch-fleet stallwatch-operator team tenant-a tenant-b"
pidfile="$data/kafka.pid"
log="$data/kafka.log"

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

resolve_jars() {
  # Resolved again when pom.xml changes (a jar added), not only when the folder is missing.
  local stamp
  stamp="$(sha1sum "$here/pom.xml" | cut -d' ' -f1)"
  [ "$(cat "$libs/.complete" 2>/dev/null)" = "$stamp" ] && return
  echo "kafka: resolving the broker's jars from Maven Central into $libs" >&2
  rm -rf "$libs"
  # No colour codes: this runs under make and CI, whose output is a file, not a terminal.
  (cd "$here" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs")
  echo "$stamp" > "$libs/.complete"
}

password_of() { sed -n "s/^$1=//p" "$data/passwords"; }

write_passwords() {
  mkdir -p "$data"
  (umask 077; touch "$data/passwords"
   for user in $USERS; do
     grep -q "^$user=" "$data/passwords" ||
       echo "$user=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')" >> "$data/passwords"
   done)
  (umask 077; cat > "$data/admin.properties" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$(password_of admin)";
PROPS
  )
}

# The SASL listener's users (PLAIN), the inter-broker login (admin), OAUTHBEARER, the authorizer.
secure_config() {
  local users=""
  for user in $USERS; do users="$users user_$user=\"$(password_of "$user")\""; done
  cat <<PROPS
listeners=SASL_PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN,OAUTHBEARER
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$(password_of admin)"$users;
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";
listener.name.controller.sasl.enabled.mechanisms=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$(password_of admin)" user_admin="$(password_of admin)";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin
PROPS
}

write_config() {
  mkdir -p "$data" "$logs"
  # Made anew with umask 077: the secure node's config holds every user's password.
  rm -f "$data/server.properties"
  (umask 077; cat > "$data/server.properties") <<PROPS
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
$(if [ "$secure" = 1 ]; then secure_config; else cat <<PLAIN
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port,CUTTABLE://127.0.0.1:$cuttable_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CUTTABLE://127.0.0.1:$proxy_port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CUTTABLE:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
PLAIN
fi)
controller.listener.names=CONTROLLER
log.dirs=$logs
num.partitions=1
offsets.topic.replication.factor=$internal_replicas
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$internal_replicas
transaction.state.log.min.isr=$internal_min_isr
share.coordinator.state.topic.replication.factor=$internal_replicas
share.coordinator.state.topic.min.isr=$internal_min_isr
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
broker.session.timeout.ms=$broker_session_ms
broker.heartbeat.interval.ms=$broker_heartbeat_ms
PROPS
  cat > "$data/log4j2.properties" <<PROPS
rootLogger.level=WARN
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.controller.name=org.apache.kafka.controller
logger.controller.level=${STALLWATCH_KAFKA_CONTROLLER_LOG_LEVEL:-WARN}
PROPS
}

java_cmd() {
  java -Xms256m -Xmx"${STALLWATCH_KAFKA_HEAP:-768m}" -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$data/log4j2.properties" -cp "$libs/*" "$@"
}

up() {
  if answers; then echo "kafka: already answering on 127.0.0.1:$port" >&2; return; fi
  resolve_jars
  if [ "$secure" = 1 ]; then write_passwords; fi
  write_config
  if [ ! -f "$logs/meta.properties" ]; then
    cluster_id="${STALLWATCH_KAFKA_CLUSTER_ID:-$(java_cmd kafka.tools.StorageTool random-uuid)}"
    java_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$data/server.properties" >/dev/null
  fi
  # A thousand tenants' topics are tens of thousands of segment files: the broker takes the
  # highest open-file limit it may.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  # The collector's pauses in $data/gc.log: a stop of every client's requests is told from the
  # broker's own pause there.
  nohup java -Xms256m -Xmx"${STALLWATCH_KAFKA_HEAP:-768m}" -XX:+UseG1GC -Djava.awt.headless=true \
    -Xlog:gc:file="$data/gc.log":time,uptime:filecount=2,filesize=10m \
    -Dlog4j2.configurationFile="$data/log4j2.properties" -cp "$libs/*" \
    kafka.Kafka "$data/server.properties" >"$log" 2>&1 &
  echo $! > "$pidfile"
  # A node of a cluster answers once a quorum of controllers runs: its starter waits for all.
  if [ "${STALLWATCH_KAFKA_NO_WAIT:-0}" = 1 ]; then return; fi
  # Up to 3 minutes: a restart with thousands of partitions on a loaded 2-core machine took
  # over a minute (the controller replays its metadata log first).
  for _ in $(seq 1 360); do
    if answers; then echo "kafka: up on 127.0.0.1:$port (pid $(cat "$pidfile"))" >&2; return; fi
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "kafka: the broker exited; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1
    fi
    sleep 0.5
  done
  echo "kafka: no answer on 127.0.0.1:$port after 180 s; see $log" >&2
  exit 1
}

# `up` from empty storage, for a command that starts its own broker (make test, make run): every
# test makes topics of its own and none deletes them, so a reused node grows run after run (8,869
# partitions and 8.6 GB in one developer's tree), until a restart replays them for longer than a
# worker's stall timeout. A node that answers, or whose process still runs, is left as it is.
fresh() {
  if ! answers && ! { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
    rm -rf "$logs"
  fi
  up
}

down() {
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill "$(cat "$pidfile")"
    for _ in $(seq 1 60); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    echo "kafka: stopped" >&2
  else
    echo "kafka: not running from $data" >&2
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  up) up ;;
  fresh) fresh ;;
  jars) resolve_jars ;;
  uuid) resolve_jars; java_cmd kafka.tools.StorageTool random-uuid ;;
  down) down ;;
  status) if answers; then echo "kafka: answering on 127.0.0.1:$port"; else echo "kafka: down"; exit 1; fi ;;
  *) echo "usage: $0 up|fresh|down|status|jars|uuid" >&2; exit 2 ;;
esac
