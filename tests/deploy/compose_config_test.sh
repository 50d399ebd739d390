#!/usr/bin/env bash
# docker-compose accepts every compose file (alone and with the GPU / TLS overlays).
set -euo pipefail
src=${CED_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/../common/missing_tool.sh"
if command -v docker-compose >/dev/null; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  skip_or_fail_missing "neither docker-compose nor the docker compose plugin is installed"
fi
dir=$src/deploy/compose
fail=0
check() {
  echo "== ${compose[*]} $* config -q"
  if ! "${compose[@]}" --project-directory "$dir" "$@" config -q; then
    echo "FAIL: $*"
    fail=1
  fi
}
check -f "$dir/docker-compose.yml"
check -f "$dir/docker-compose.yml" -f "$dir/docker-compose.gpu.yml"
check -f "$dir/docker-compose.yml" -f "$dir/docker-compose.tls.yml"
# Every compose file in the folder is covered above.
for f in "$dir"/*.yml; do
  case $(basename "$f") in
    docker-compose.yml|docker-compose.gpu.yml|docker-compose.tls.yml) ;;
    *) echo "FAIL: $f is not checked by this test"; fail=1 ;;
  esac
done
# Only the gateway and Prometheus publish ports.
published=$("${compose[@]}" --project-directory "$dir" -f "$dir/docker-compose.yml" config |
  awk '/^  [a-z-]+:$/ {svc=$1} /^    ports:/ {print svc}' | tr -d ':' | sort | tr '\n' ' ')
if [[ "$published" != "gateway prometheus " ]]; then
  echo "FAIL: services publishing ports: '$published' (want: gateway prometheus)"
  fail=1
fi
exit $fail
