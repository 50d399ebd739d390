#!/usr/bin/env bash
# TTFT of one long prompt through the whole system (client -> gateway ->
# router -> prefill worker -> K/V over UCX -> decode worker) against the
# engine bench's prefill TTFT of the same prompt length on the same machine,
# for every CPU kernel variant this CPU supports (CED_CPU_ISA).
#
# Usage: bench/system/gateway_ttft.sh [--build DIR] [--tokens N] [--reps R] [--out FILE]
#   defaults: --build build --tokens 2048 --reps 5 --out bench/results/gateway_ttft.md
# Per variant: a `ced cluster` (1 prefill, 1 decode worker, model `small`)
# serves R requests of N random token ids with max_tokens 1 (medians of the
# client-side TTFT), then `ced_engine_bench --sections=prefill` measures the
# engine's TTFT of the same length (median of R repetitions, CED bounded
# replay, as the cluster serves it). Target (issue 14): ratio <= 1.25.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build TOKENS=2048 REPS=5 OUT=bench/results/gateway_ttft.md
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gateway_ttft.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
CED=$BUILD/bin/ced
BENCH=$BUILD/bin/ced_engine_bench
for b in "$CED" "$BENCH"; do
  [[ -x $b ]] || { echo "gateway_ttft.sh: $b not built (ninja -C $BUILD ced ced_engine_bench)" >&2; exit 2; }
done
PY=/usr/bin/python3
threads=${OMP_NUM_THREADS:-$(nproc)}
work=$(mktemp -d)
cluster_pid=""
cleanup() {
  [[ -n $cluster_pid ]] && kill "$cluster_pid" 2>/dev/null && wait "$cluster_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$CED" model make --preset small --seed 1 --out "$work/small" >/dev/null
# A prompt of its own for every request (seed = request number): the workers'
# prefix caches would otherwise serve every request after the first from the
# cache (2,032 of 2,048 tokens cached) and the router would prefill the
# short rest on the decode worker.
prompt_ids() {
  $PY -c "import random; random.seed($1); print(','.join(str(random.randrange(3, 256)) for _ in range($TOKENS)))"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# The variants this CPU runs: the ones `ced` accepts in CED_CPU_ISA.
isas=""
for isa in generic avx2 avx512; do
  CED_CPU_ISA=$isa "$CED" model info --preset tiny >/dev/null 2>&1 && isas="$isas $isa"
done
rows=""
for isa in $isas; do
  echo "[$isa] cluster" >&2
  rm -f "$work/ready"
  # Every worker gets all cores, as a dedicated prefill instance has (by default
  # `ced cluster` splits the cores among its workers: 1 thread each here).
  OMP_NUM_THREADS=$threads CED_CPU_ISA=$isa "$CED" cluster --model "$work/small" \
    --base-port 0 --metrics-base-port 0 \
    --ready-file "$work/ready" >"$work/cluster_$isa.log" 2>&1 &
  cluster_pid=$!
  for _ in $(seq 120); do [[ -s $work/ready ]] && break; sleep 0.5; done
  [[ -s $work/ready ]] || { cat "$work/cluster_$isa.log" >&2; echo "cluster did not start" >&2; exit 1; }
  gw=$(awk '$1 == "gateway" {sub("grpc=", "", $2); print $2}' "$work/ready")
  # One warm-up request (weights packed, connections made), then the measured ones.
  "$CED" client generate --gateway "$gw" --prompt-ids "$(prompt_ids 1000)" --max-tokens 1 >/dev/null 2>&1
  : >"$work/gw_$isa"
  for r in $(seq "$REPS"); do
    line=$("$CED" client generate --gateway "$gw" --prompt-ids "$(prompt_ids "$r")" --max-tokens 1 2>&1 >/dev/null | tail -1)
    echo "[$isa] $line" >&2
    # Every sample must be a whole prefill on the prefill worker.
    if ! grep -q "(cached 0)" <<<"$line" || ! grep -q "prefill prefill-" <<<"$line"; then
      echo "gateway_ttft.sh: request $r was not a whole prefill on the prefill worker: $line" >&2
      exit 1
    fi
    sed -n 's/.*| TTFT \([0-9.]*\) ms, TPOT.*/\1/p' <<<"$line" >>"$work/gw_$isa"
  done
  kill "$cluster_pid"; wait "$cluster_pid" 2>/dev/null || true; cluster_pid=""
  echo "[$isa] engine bench" >&2
  OMP_NUM_THREADS=$threads CED_CPU_ISA=$isa "$BENCH" --sections=prefill --variants=active --prompt_tokens="$TOKENS" \
    --prefill_reps="$REPS" --scratch_dir="$work/bench" --markdown="$work/e_$isa.md" \
    --json="$work/e_$isa.json" 2>/dev/null
  engine_ms=$($PY -c "import json; d=json.load(open('$work/e_$isa.json')); print(1e3*d['prefill']['variants'][0]['ttft_s']['median'])")
  gw_ms=$(median <"$work/gw_$isa")
  samples=$(sort -g "$work/gw_$isa" | paste -sd' ')
  ratio=$(awk -v a="$gw_ms" -v b="$engine_ms" 'BEGIN {printf "%.2f", a / b}')
  rows+="| \`$isa\` | $(printf %.0f "$engine_ms") | $(printf %.0f "$gw_ms") ($samples) | $ratio | $(awk -v r="$ratio" 'BEGIN {print (r <= 1.25) ? "yes" : "**no**"}') |"$'\n'
done
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
{
  echo "# TTFT through the whole system vs the engine"
  echo
  echo "- Command: \`bench/system/gateway_ttft.sh --tokens $TOKENS --reps $REPS\`"
  echo "- Date (UTC): $(date -u +%Y-%m-%dT%H:%M:%SZ); CPU: $cpu, $(nproc) cores; load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- Model \`small\` (seed 1), $TOKENS-token prompts of random ids, a different one per request (no prefix-cache hit: every sample checked to have 0 cached tokens and its prefill on the prefill worker), max_tokens 1; cluster: 1 prefill + 1 decode worker, router, gateway, K/V over UCX on loopback; replay bounded on the prefill worker (the router's default). Workers and engine bench run $threads kernel threads each (OMP_NUM_THREADS; \`ced cluster\` alone would split the cores among its workers)."
  echo "- Gateway: client-side TTFT (ms), median of $REPS after one warm-up request (all samples in brackets). Engine: \`ced_engine_bench --sections=prefill\` CED bounded TTFT, median of $REPS."
  echo
  echo "| kernel variant | engine TTFT, ms | gateway TTFT, ms (samples) | ratio | <= 1.25 |"
  echo "|---|---|---|---|---|"
  printf "%s" "$rows"
} | tee "$OUT"
