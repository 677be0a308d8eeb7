#!/usr/bin/env bash
# Prometheus and promtool from Debian's packages, for the tests (`make test` runs this).
# Idempotent: nothing happens when promtool is already on the PATH.
set -euo pipefail
command -v promtool >/dev/null && command -v prometheus >/dev/null && exit 0
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
echo "prometheus: installing Debian's prometheus package (prometheus, promtool)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package may start its own service where an init system runs; the tests start their own.
$SUDO systemctl stop prometheus >/dev/null 2>&1 || true
