#!/usr/bin/env bash
# Requests the decode side has no K/V room for: refused at once (--kv-wait-ms 0)
# against queued in the gateway until room frees (--kv-wait-ms, the default),
# side by side on the same machine, every run listed.
#
# Usage: bench/system/kv_wait.sh [--build DIR] [--runs R] [--out FILE]
#   defaults: --build build --runs 2 --out bench/results/kv_wait_bench.md
# Per setting (0, then 30000 ms): a `ced up` on the default model with a 2 MiB
# K/V cache per decode worker (two 200-token requests fit at once), then R runs
# of `ced-loadgen --concurrency 16 --num-requests 48` (100-token prompts, 100
# tokens each, fixed lengths). Refused requests count as errors; with waiting,
# every request is served and TTFT holds the wait.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build RUNS=2 OUT=bench/results/kv_wait_bench.md
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "kv_wait.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
CED=$BUILD/bin/ced
LOADGEN=$BUILD/bin/ced-loadgen
for b in "$CED" "$LOADGEN"; do
  [[ -x $b ]] || { echo "kv_wait.sh: $b not built (bash scripts/build.sh)" >&2; exit 2; }
done
PY=/usr/bin/python3
work=$(mktemp -d)
cluster_pid=""
cleanup() {
  [[ -n $cluster_pid ]] && kill "$cluster_pid" 2>/dev/null && wait "$cluster_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
isa=$("$CED" model info --preset tiny 2>/dev/null | sed -n "s/^cpu kernels: \([a-z0-9]*\).*/\1/p" | head -1)
rows=""
for wait_ms in 0 30000; do
  echo "[--kv-wait-ms $wait_ms] cluster" >&2
  rm -f "$work/ready"
  "$CED" up --base-port 0 --metrics-base-port 0 --kv-cache-mb 2 --kv-wait-ms "$wait_ms" \
    --ready-file "$work/ready" >"$work/cluster_$wait_ms.log" 2>&1 &
  cluster_pid=$!
  for _ in $(seq 120); do [[ -s $work/ready ]] && break; sleep 0.5; done
  [[ -s $work/ready ]] || { cat "$work/cluster_$wait_ms.log" >&2; echo "cluster did not start" >&2; exit 1; }
  gw=$(awk '$1 == "gateway" {sub("grpc=", "", $2); print $2}' "$work/ready")
  for r in $(seq "$RUNS"); do
    "$LOADGEN" --target "$gw" --concurrency 16 --num-requests 48 --input-mean 100 \
      --output-mean 100 --input-cv 0 --output-cv 0 --seed "$r" --timeout-s 120 \
      --json-out "$work/run_${wait_ms}_$r.json" >/dev/null 2>"$work/loadgen_${wait_ms}_$r.log" || {
      cat "$work/loadgen_${wait_ms}_$r.log" >&2; exit 1; }
    row=$($PY - "$work/run_${wait_ms}_$r.json" "$wait_ms" "$r" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
t = run["ttft_ms"]
errors = ", ".join(f"{k} {v}" for k, v in sorted(run["errors"].items())) or "none"
print(f"| {sys.argv[2]} | {sys.argv[3]} | {run['request_throughput']:.2f} | "
      f"{t['p50']:,.0f} / {t['p90']:,.0f} / {t['p99']:,.0f} | "
      f"{run['succeeded']} / {run['issued']} | {errors} |")
EOF
)
    echo "$row" >&2
    rows+="$row"$'\n'
  done
  kill "$cluster_pid"; wait "$cluster_pid" 2>/dev/null || true; cluster_pid=""
done
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
{
  echo "# Waiting for K/V room in the gateway: refused at once vs queued"
  echo
  echo "- Command: \`bench/system/kv_wait.sh --runs $RUNS\`"
  echo "- Date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ); CPU: $cpu, $(nproc) cores, \`${isa:-?}\` kernels; load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- \`ced up\` (default model, 1 prefill + 1 decode worker) with \`--kv-cache-mb 2\`: two 200-token requests fit in a decode worker's cache at once; \`ced-loadgen --concurrency 16 --num-requests 48\`, 100-token prompts and 100 generated tokens (fixed), seed = run number. TTFT over the served requests; a refused request (\`RESOURCE_EXHAUSTED\`) is an error."
  echo
  echo "| --kv-wait-ms | run | req/s | TTFT p50 / p90 / p99 (ms) | served / sent | errors |"
  echo "|---:|---:|---:|---:|---:|---|"
  printf "%s" "$rows"
} | tee "$OUT"
