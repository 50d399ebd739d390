#!/usr/bin/env bash
# `kubectl kustomize` renders every overlay, and every rendered object
# validates against the Kubernetes OpenAPI schema (npm kubernetes-models,
# installed into the build tree on first use).
set -euo pipefail
src=${CED_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/../common/missing_tool.sh"
build=${CED_BINARY_DIR:-$src/build}
if ! command -v kubectl >/dev/null; then
  skip_or_fail_missing "kubectl is not installed"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
overlays=()
for d in "$src"/deploy/k8s/overlays/*/; do overlays+=("$(basename "$d")"); done
for o in "${overlays[@]}"; do
  echo "== kubectl kustomize overlays/$o"
  if ! kubectl kustomize "$src/deploy/k8s/overlays/$o" >"$work/$o.yaml" 2>"$work/$o.err"; then
    cat "$work/$o.err"
    echo "FAIL: overlay $o does not render"
    fail=1
  fi
done
((fail == 0)) || exit 1

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "FAIL: node/npm missing (scripts/install_deps.sh installs them); rendering passed"
  exit 1
fi
mods=$build/deploy-node
if [[ ! -d "$mods/node_modules/kubernetes-models" ]]; then
  mkdir -p "$mods"
  cp "$src/tests/deploy/package.json" "$mods/package.json"
  npm install --prefix "$mods" --no-audit --no-fund --loglevel=error >/dev/null
fi
for o in "${overlays[@]}"; do
  echo "== schema: overlays/$o"
  NODE_PATH=$mods/node_modules node "$src/tests/deploy/validate_k8s.mjs" "$mods/node_modules" \
    "$o" "$work/$o.yaml" || fail=1
done
exit $fail
