#!/usr/bin/env bash
# The compose topology runs for real without containers: every replica in its
# own network namespace with its own address, started with the compose file's
# command/environment through the image entrypoint (deploy/netns/compose_netns.py).
# A client in another namespace generates through the gateway's address and
# must get the tokens of a local `ced generate`; Prometheus must report every
# service's target up. Needs root and `ip netns`: exits 77 (skipped) without.
set -euo pipefail
src=${CED_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/../common/missing_tool.sh"
bin=${CED_BINARY_DIR:-$src/build}/bin/ced
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: needs root (network namespaces, veth pairs)"
  exit 77
fi
if ! /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
  # python3-yaml comes with Debian's docker-compose, which install_deps.sh installs.
  skip_or_fail_missing "/usr/bin/python3 with yaml (apt: python3-yaml) is not installed"
fi
exec /usr/bin/python3 "$src/deploy/netns/compose_netns.py" --ced "$bin" \
  --scale prefill=2 --scale decode=2 --check
