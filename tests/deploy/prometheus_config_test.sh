#!/usr/bin/env bash
# promtool accepts the Prometheus config, and it scrapes every ced role; the
# Grafana dashboard is JSON and uses only metric names the services define.
set -euo pipefail
src=${CED_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/../common/missing_tool.sh"
if ! command -v promtool >/dev/null; then
  skip_or_fail_missing "promtool is not installed"
fi
cfg=$src/deploy/prometheus/prometheus.yml
promtool check config "$cfg"
fail=0
for job in ced-gateway ced-router ced-prefill ced-decode; do
  grep -q "job_name: $job\$" "$cfg" || { echo "FAIL: no scrape job $job"; fail=1; }
done
dash=$src/deploy/grafana/ced-dashboard.json
python3 -m json.tool "$dash" >/dev/null || { echo "FAIL: $dash is not JSON"; fail=1; }
for m in $(grep -o 'ced_[a-z0-9_]*' "$dash" | sed 's/_bucket$//' | sort -u); do
  base=${m%_total}
  if ! grep -rqE "\"(${m}|${base})\"" "$src/services"; then
    echo "FAIL: dashboard metric $m is not defined under services/"
    fail=1
  fi
done
exit $fail
