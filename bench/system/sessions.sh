#!/usr/bin/env bash
# Agent sessions on `small` (issue 16 targets): TTFT of turns >= 2 with the
# prefix cache against without it, CED (`small`) against decoder-only
# (`small-dec`), on the same trace, side by side in one run.
#
# Usage: bench/system/sessions.sh [--build DIR] [--sessions S] [--turns T]
#          [--first N] [--tool N] [--output N] [--think-ms MS] [--reps R]
#          [--seed N] [--kv-cache-mb MB] [--out-dir DIR] [--tag NAME]
#   defaults: --build build --sessions 2 --turns 8 --first 1000 --tool 1000
#             --output 16 --think-ms 500 --reps 2 --seed 1 --out-dir bench/results
# Starts four `ced cluster`s (1 prefill + 1 decode worker each): small and
# small-dec, each with and without --prefix-cache. One warm-up turn per
# cluster packs the weights; then each repetition runs `ced-loadgen
# --workload agent` once over the four targets (one after the other, the same
# trace; repetition r uses seed + r, so no repetition finds the previous one's
# prompts cached). Sessions grow by (output + tool) tokens a turn: with the
# defaults from 1,000 to 8,112 prompt tokens in 8 turns. Writes
# OUT_DIR/sessions[_TAG]_run<r>.{json,md} per repetition,
# OUT_DIR/plots/sessions[_TAG]_ttft.svg and prints a summary (sessions_plot.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build SESSIONS=2 TURNS=8 FIRST=1000 TOOL=1000 OUTPUT=16 THINK=500 REPS=2 SEED=1 KVMB=0
OUT_DIR=bench/results TAG=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --sessions) SESSIONS=$2; shift 2 ;;
    --turns) TURNS=$2; shift 2 ;;
    --first) FIRST=$2; shift 2 ;;
    --tool) TOOL=$2; shift 2 ;;
    --output) OUTPUT=$2; shift 2 ;;
    --think-ms) THINK=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --kv-cache-mb) KVMB=$2; shift 2 ;;
    --out-dir) OUT_DIR=$2; shift 2 ;;
    --tag) TAG=_$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "sessions.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
CED=$BUILD/bin/ced
LOADGEN=$BUILD/bin/ced-loadgen
for b in "$CED" "$LOADGEN"; do
  [[ -x $b ]] || { echo "sessions.sh: $b not built (ninja -C $BUILD ced ced-loadgen)" >&2; exit 2; }
done
PY=/usr/bin/python3
# Room for every session's context (f32 K/V of small: 24 KiB a token) twice
# over, so no session of a repetition is evicted.
if [[ $KVMB == 0 ]]; then
  longest=$(( FIRST + (TURNS - 1) * (OUTPUT + TOOL) + OUTPUT ))
  KVMB=$(( (2 * SESSIONS * longest * 24 + 1023) / 1024 + 64 ))
fi
threads=${OMP_NUM_THREADS:-$(nproc)}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
"$CED" model make --preset small --seed 1 --out "$work/small" >/dev/null
"$CED" model make --preset small-dec --seed 1 --out "$work/small-dec" >/dev/null
names=(ced-cache ced-nocache dec-cache dec-nocache)
models=(small small small-dec small-dec)
caches=(true false true false)
targets=""
for i in 0 1 2 3; do
  # Only one cluster computes at a time (the load generator runs the targets
  # one after the other), so every worker gets all cores, as a dedicated
  # instance has (`ced cluster` alone would split the cores among workers).
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$CED" cluster --model "$work/${models[$i]}" \
    --prefill 1 --decode 1 --base-port 0 --metrics-base-port 0 --http false \
    --kv-cache-mb "$KVMB" --prefix-cache="${caches[$i]}" \
    --ready-file "$work/ready_${names[$i]}" >"$work/cluster_${names[$i]}.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2 3; do
  f=$work/ready_${names[$i]}
  for _ in $(seq 240); do [[ -s $f ]] && break; sleep 0.5; done
  [[ -s $f ]] || { cat "$work/cluster_${names[$i]}.log" >&2; echo "cluster ${names[$i]} did not start" >&2; exit 1; }
  gw=$(awk '$1 == "gateway" {sub("grpc=", "", $2); print $2}' "$f")
  targets+="${targets:+,}${names[$i]}=$gw"
done
echo "[sessions] targets $targets; KV budget $KVMB MiB per worker; $threads threads per worker" >&2
# Warm-up: one short turn per cluster (weights packed on first use,
# connections made); a seed of its own, so it shares no prefix with the runs.
"$LOADGEN" --workload agent --target "$targets" --sessions 1 --turns 1 --first-prompt-tokens 64 \
  --output-tokens 2 --seed 999999 --timeout-s 600 --md-out "$work/warmup.md" 2>/dev/null
mkdir -p "$OUT_DIR/plots"
runs=()
for r in $(seq "$REPS"); do
  echo "[sessions] repetition $r of $REPS (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$LOADGEN" --workload agent --target "$targets" --sessions "$SESSIONS" --turns "$TURNS" \
    --first-prompt-tokens "$FIRST" --tool-result-mean "$TOOL" --tool-result-cv 0 \
    --output-tokens "$OUTPUT" --think-time-ms "$THINK" --seed $(( SEED + r )) --timeout-s 900 \
    --json-out "$OUT_DIR/sessions${TAG}_run$r.json" --md-out "$OUT_DIR/sessions${TAG}_run$r.md"
  runs+=("$OUT_DIR/sessions${TAG}_run$r.json")
done
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
echo "[sessions] CPU: $cpu, $(nproc) cores; load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$PY" bench/system/sessions_plot.py --svg "$OUT_DIR/plots/sessions${TAG}_ttft.svg" "${runs[@]}"
