#!/usr/bin/env bash
# The main job: builds ced, serves the trained default model (models/ced-pydocs:
# a small CED trained on the Python documentation, bench/quality), starts the
# disaggregated topology as local processes on loopback (router,
# gateway, one encoder-only-capable prefill worker, one decode worker, K/V over
# UCX) and answers a request through the public gRPC gateway.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CED_BUILD_DIR:-build}
bash scripts/build.sh ced
CED="$BUILD_DIR/bin/ced"
# CED_MODEL_DIR serves another model folder; one without weights gets the synthetic
# `tiny` preset (random weights: its text is noise).
MODEL_DIR=${CED_MODEL_DIR:-models/ced-pydocs}
if [[ ! -f "$MODEL_DIR/model.safetensors" ]]; then
  "$CED" model make --preset tiny --seed 1 --out "$MODEL_DIR"
fi
MODEL_NAME=$(basename "$MODEL_DIR")
DEFAULT_PROMPT='The :mod:`json` module'
PROMPT=${CED_PROMPT:-$DEFAULT_PROMPT}
"$CED" model info "$MODEL_DIR"

RUN_DIR=$(mktemp -d)
cleanup() {
  if [[ -n "${CLUSTER_PID:-}" ]] && kill -0 "$CLUSTER_PID" 2>/dev/null; then
    kill -TERM "$CLUSTER_PID" 2>/dev/null || true
    wait "$CLUSTER_PID" 2>/dev/null || true
  fi
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT
echo "--- starting the local cluster (log: $RUN_DIR/cluster.log) ---"
"$CED" cluster --model "$MODEL_DIR" --prefill 1 --decode 1 --base-port 0 --metrics-base-port 0 \
  --ready-file "$RUN_DIR/ready" >"$RUN_DIR/cluster.log" 2>&1 &
CLUSTER_PID=$!
for _ in $(seq 1 600); do
  [[ -f "$RUN_DIR/ready" ]] && break
  if ! kill -0 "$CLUSTER_PID" 2>/dev/null; then
    cat "$RUN_DIR/cluster.log"; echo "cluster failed to start" >&2; exit 1
  fi
  sleep 0.2
done
[[ -f "$RUN_DIR/ready" ]] || { cat "$RUN_DIR/cluster.log"; echo "cluster not ready" >&2; exit 1; }
cat "$RUN_DIR/ready"
GATEWAY=$(awk '$1 == "gateway" { for (i = 2; i <= NF; i++) if ($i ~ /^grpc=/) print substr($i, 6) }' "$RUN_DIR/ready")
echo "--- request through the gateway at $GATEWAY ---"
for placement in prefill decode; do
  "$CED" client generate --gateway "$GATEWAY" --prompt "$PROMPT" \
    --max-tokens "${CED_MAX_TOKENS:-32}" --replay-on "$placement"
done
# The same cluster speaks the OpenAI API (the gateway's --http-listen).
HTTP=$(awk '$1 == "gateway" { for (i = 2; i <= NF; i++) if ($i ~ /^http=/) print substr($i, 6) }' "$RUN_DIR/ready")
if [[ -n "$HTTP" ]] && command -v curl >/dev/null; then
  echo "--- the same through the OpenAI-compatible API at http://$HTTP ---"
  curl -sS "http://$HTTP/v1/completions" -H 'Content-Type: application/json' \
    -d "$(MODEL="$MODEL_NAME" PROMPT="$PROMPT" MAX="${CED_MAX_TOKENS:-32}" /usr/bin/python3 -c \
      'import json, os; print(json.dumps({"model": os.environ["MODEL"], "prompt": os.environ["PROMPT"], "max_tokens": int(os.environ["MAX"]), "temperature": 0}))')"
  echo
fi
