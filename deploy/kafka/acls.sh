#!/usr/bin/env bash
# The ACLs of a shared cluster, least privilege, through Kafka's own AclCommand (idempotent: an
# ACL that exists is left as it is). docs/operations.md, "Trust model and authorization".
#
#   acls.sh [--print] worker PRINCIPAL             decision workers: every tenant's topics
#   acls.sh [--print] fleet PRINCIPAL              the fleet app: tallies in, incidents and advisories out
#   acls.sh [--print] operator PRINCIPAL           `stallwatch top`, `explain`: read the commands
#   acls.sh [--print] team PRINCIPAL               a one-team deployment's runtimes: write the
#                                                  shared events, read the shared commands (every
#                                                  such producer is trusted)
#   acls.sh [--print] tenant NAME PRINCIPAL [FLEET_PRINCIPAL]
#                                                  a tenant's runtimes: write its events, read its
#                                                  commands and dead letters; the fleet app may
#                                                  write its events (advisories); and the
#                                                  principal's quotas (below)
#
# --print writes the grants, one a line (principal resource name pattern operation), then a
# tenant's quotas (principal quota name value), and applies nothing. A tenant's principal gets
# Kafka quotas, so that one team's flood of events or reads slows that team alone:
# STALLWATCH_TENANT_PRODUCER_BYTE_RATE (bytes/s, 1048576), STALLWATCH_TENANT_CONSUMER_BYTE_RATE
# (bytes/s, 2097152), STALLWATCH_TENANT_REQUEST_PERCENTAGE (% of one broker thread, 25). Environment: STALLWATCH_TOPIC_PREFIX (stallwatch), STALLWATCH_BOOTSTRAP
# (127.0.0.1:$STALLWATCH_KAFKA_PORT), KAFKA_ADMIN_CONFIG (the admin's client properties; by default
# the local secure broker's), KAFKA_ACLS (the AclCommand to run; by default kafka-acls.sh on the
# PATH, else the project's jars).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
port="${STALLWATCH_KAFKA_PORT:-9092}"
prefix="${STALLWATCH_TOPIC_PREFIX:-stallwatch}"
bootstrap="${STALLWATCH_BOOTSTRAP:-127.0.0.1:$port}"
config="${KAFKA_ADMIN_CONFIG:-$root/.cache/kafka-data/$port/admin.properties}"
libs="${STALLWATCH_KAFKA_CACHE:-$root/.cache/kafka}/libs"

print=0
if [ "${1:-}" = "--print" ]; then print=1; shift; fi

usage() { sed -n '4,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

producer_rate="${STALLWATCH_TENANT_PRODUCER_BYTE_RATE:-1048576}"
consumer_rate="${STALLWATCH_TENANT_CONSUMER_BYTE_RATE:-2097152}"
request_percentage="${STALLWATCH_TENANT_REQUEST_PERCENTAGE:-25}"

# grant PRINCIPAL RESOURCE NAME PATTERN OPERATION...   (RESOURCE: topic, group, transactional-id)
grant() {
  local principal=$1 resource=$2 name=$3 pattern=$4 operations=()
  shift 4
  for operation in "$@"; do
    if [ "$print" = 1 ]; then echo "$principal $resource $name $pattern $operation"; fi
    operations+=(--operation "$operation")
  done
  if [ "$print" = 0 ]; then
    acl_command --add --allow-principal "$principal" "${operations[@]}" \
      "--$resource" "$name" --resource-pattern-type "$pattern" >/dev/null
  fi
}

# quota PRINCIPAL: the tenant quotas on the principal (User:NAME), through Kafka's ConfigCommand.
quota() {
  local principal=$1 user=${1#User:}
  local configs="producer_byte_rate=$producer_rate,consumer_byte_rate=$consumer_rate"
  configs="$configs,request_percentage=$request_percentage"
  if [ "$print" = 1 ]; then
    echo "$principal quota producer_byte_rate $producer_rate"
    echo "$principal quota consumer_byte_rate $consumer_rate"
    echo "$principal quota request_percentage $request_percentage"
    return
  fi
  local command=${KAFKA_CONFIGS:-}
  if [ -z "$command" ] && command -v kafka-configs.sh >/dev/null; then command=kafka-configs.sh; fi
  if [ -n "$command" ]; then
    $command --bootstrap-server "$bootstrap" --command-config "$config" \
      --alter --entity-type users --entity-name "$user" --add-config "$configs" >/dev/null
  else
    java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.level=WARN -cp "$libs/*" \
      kafka.admin.ConfigCommand --bootstrap-server "$bootstrap" --command-config "$config" \
      --alter --entity-type users --entity-name "$user" --add-config "$configs" >/dev/null
  fi
}

acl_command() {
  local command=${KAFKA_ACLS:-}
  if [ -z "$command" ] && command -v kafka-acls.sh >/dev/null; then command=kafka-acls.sh; fi
  if [ -n "$command" ]; then
    $command --bootstrap-server "$bootstrap" --command-config "$config" "$@"
  else
    # A JVM per grant, each living a second or two: the quick compiler and the small collector.
    java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.level=WARN -cp "$libs/*" \
      org.apache.kafka.tools.AclCommand \
      --bootstrap-server "$bootstrap" --command-config "$config" "$@"
  fi
}

worker() {
  # Every topic under the prefix (the shared ones and each tenant's; it creates what is missing),
  # its consumer groups and the transactional ids of its per-partition producers.
  grant "$1" topic "$prefix." prefixed Read Write Describe Create DescribeConfigs
  grant "$1" group "$prefix-detector" prefixed Read Describe
  grant "$1" transactional-id "$prefix-detector" prefixed Write Describe
}

fleet() {
  grant "$1" topic "$prefix.tallies" literal Read Describe
  grant "$1" topic "$prefix.fleet-partials" literal Read Write Describe
  grant "$1" topic "$prefix.incidents" literal Read Write Describe
  grant "$1" topic "$prefix.deadletter" literal Write Describe
  grant "$1" topic "$prefix.events" literal Write Describe  # advisories, one-team deployments
  # Its own table's changelog and Faust's assignor topic, and its consumer group.
  grant "$1" topic "$prefix-fleet" prefixed Read Write Describe Create DescribeConfigs
  grant "$1" group "$prefix-fleet" prefixed Read Describe
}

operator() {
  grant "$1" topic "$prefix." prefixed Read Describe
}

team() {
  # Not the shared dead letters: the fleet app's are keyed by any tenant's name and tool.
  grant "$1" topic "$prefix.events" literal Write Describe
  grant "$1" topic "$prefix.commands" literal Read Describe
}

tenant() {
  local name=$1 principal=$2 fleet_principal=${3:-}
  [[ "$name" =~ ^[A-Za-z0-9_-]{1,64}$ ]] || { echo "acls.sh: tenant name $name: use letters, digits, _ and -" >&2; exit 2; }
  local topics="$prefix.tenant.$name"
  grant "$principal" topic "$topics.events" literal Write Describe
  grant "$principal" topic "$topics.commands" literal Read Describe
  grant "$principal" topic "$topics.deadletter" literal Read Describe
  if [ -n "$fleet_principal" ]; then
    grant "$fleet_principal" topic "$topics.events" literal Write Describe
  fi
  quota "$principal"
}

case "${1:-}" in
  worker|fleet|operator|team) [ $# -eq 2 ] || usage; "$1" "$2" ;;
  tenant) [ $# -ge 3 ] && [ $# -le 4 ] || usage; shift; tenant "$@" ;;
  *) usage ;;
esac
