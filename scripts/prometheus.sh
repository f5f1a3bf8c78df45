#!/usr/bin/env bash
# Prometheus and its Pushgateway from Debian's packages (`prometheus`, `prometheus-pushgateway`),
# for the production profile, the alert-rule tests and the compose profile's images. Nothing to
# do when both commands are there; otherwise, as root, apt-get installs them (neither is started
# as a service: the profile starts its own).
#
#   scripts/prometheus.sh && prometheus --version
set -euo pipefail

if command -v prometheus > /dev/null && command -v prometheus-pushgateway > /dev/null \
  && command -v promtool > /dev/null; then
  echo "$(prometheus --version 2>&1 | head -1)"
  exit 0
fi
# shellcheck source=scripts/as-root.sh
source "$(dirname "$0")/as-root.sh"
as_root "$0" "$@"  # root for apt-get
echo "==> apt-get install prometheus prometheus-pushgateway"
apt-get update -q > /dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  prometheus prometheus-pushgateway > /tmp/prometheus-apt.log 2>&1 \
  || { tail -20 /tmp/prometheus-apt.log; exit 1; }
# the packages' services are not wanted here: the profile starts its own processes
for service in prometheus prometheus-pushgateway; do
  if command -v service > /dev/null; then service "$service" stop > /dev/null 2>&1 || true; fi
done
echo "$(prometheus --version 2>&1 | head -1)"
