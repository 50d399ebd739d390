#!/usr/bin/env bash
# The main job: builds ced, makes the embedded default model (`tiny`, seed 1),
# starts the disaggregated topology as local processes on loopback (router,
# gateway, one encoder-only-capable prefill worker, one decode worker, K/V over
# UCX) and answers a request through the public gRPC gateway.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CED_BUILD_DIR:-build}
bash scripts/build.sh ced
CED="$BUILD_DIR/bin/ced"
MODEL_DIR=${CED_MODEL_DIR:-$BUILD_DIR/models/tiny}
if [[ ! -f "$MODEL_DIR/model.safetensors" ]]; then
  "$CED" model make --preset tiny --seed 1 --out "$MODEL_DIR"
fi
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
  "$CED" client generate --gateway "$GATEWAY" --prompt "${CED_PROMPT:-Hello from ced-serve}" \
    --max-tokens "${CED_MAX_TOKENS:-32}" --replay-on "$placement"
done
# The same cluster speaks the OpenAI API (the gateway's --http-listen).
HTTP=$(awk '$1 == "gateway" { for (i = 2; i <= NF; i++) if ($i ~ /^http=/) print substr($i, 6) }' "$RUN_DIR/ready")
if [[ -n "$HTTP" ]] && command -v curl >/dev/null; then
  echo "--- the same through the OpenAI-compatible API at http://$HTTP ---"
  curl -sS "http://$HTTP/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"tiny\", \"prompt\": \"${CED_PROMPT:-Hello from ced-serve}\", \"max_tokens\": ${CED_MAX_TOKENS:-32}, \"seed\": 1}"
  echo
fi
