#!/usr/bin/env bash
# Agent sessions on `small` (issue 16 targets): TTFT of turns >= 2 with the
# prefix cache against without it, CED (`small`) against decoder-only
# (`small-dec`), on the same trace, side by side in one run.
#
# Usage: bench/system/sessions.sh [--build DIR] [--sessions S] [--turns T]
#          [--first N] [--tool N] [--output N] [--think-ms MS] [--reps R]
#          [--seed N] [--kv-cache-mb MB] [--held-sequences N] [--out-dir DIR]
#          [--tag NAME] [--sim]
#   defaults: --build build --sessions 2 --turns 8 --first 1000 --tool 1000
#             --output 16 --think-ms 500 --reps 2 --seed 1 --out-dir bench/results
# --held-sequences: the prefill workers' (and the simulator's) held sequences
# (default: the worker's, 8; 0 resumes every turn from blocks, with the
# encoder rebuild).
# Starts four `ced cluster`s (1 prefill + 1 decode worker each): small and
# small-dec, each with and without --prefix-cache. One warm-up turn per
# cluster packs the weights; then each repetition runs `ced-loadgen
# --workload agent` once over the four targets (one after the other, the same
# trace; repetition r uses seed + r, so no repetition finds the previous one's
# prompts cached). Sessions grow by (output + tool) tokens a turn: with the
# defaults from 1,000 to 8,112 prompt tokens in 8 turns. Writes
# OUT_DIR/sessions[_TAG]_run<r>.{json,md} per repetition,
# OUT_DIR/plots/sessions[_TAG]_ttft.svg and prints a summary (sessions_plot.py).
# --sim: before any cluster starts, ced-sim-calibrate measures a device
# profile of this machine (OUT_DIR/sessions[_TAG]_profile.txt, frozen) and
# ced-sim --workload agent predicts every repetition's trace on every target
# (one prefill + one decode instance sharing the machine, as the clusters do;
# OUT_DIR/sessions[_TAG]_run<r>_sim_calibrated_<target>.json). Then, on the
# idle clusters before the runs, a probe times 1,024-token prefills in the CED
# cluster against the same prefill in process; the profile with its prefill
# rates scaled by that ratio (..._profile_probe.txt) predicts the traces
# again (..._sim_probe_<target>.json). After the runs,
# sessions_sim_compare.py sets both predictions' TTFT per turn against the
# measured (OUT_DIR/sessions[_TAG]_sim.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build SESSIONS=2 TURNS=8 FIRST=1000 TOOL=1000 OUTPUT=16 THINK=500 REPS=2 SEED=1 KVMB=0
OUT_DIR=bench/results TAG="" SIM=false HELD=8
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
    --held-sequences) HELD=$2; shift 2 ;;
    --out-dir) OUT_DIR=$2; shift 2 ;;
    --tag) TAG=_$2; shift 2 ;;
    --sim) SIM=true; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "sessions.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $HELD =~ ^[0-9]+$ ]] || { echo "sessions.sh: --held-sequences must be an integer >= 0, got '$HELD'" >&2; exit 2; }
CED=$BUILD/bin/ced
LOADGEN=$BUILD/bin/ced-loadgen
bins=("$CED" "$LOADGEN")
$SIM && bins+=("$BUILD/bin/ced-sim" "$BUILD/bin/ced-sim-calibrate")
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "sessions.sh: $b not built (ninja -C $BUILD ced ced-loadgen ced-sim ced-sim-calibrate)" >&2; exit 2; }
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
mkdir -p "$OUT_DIR/plots"
if $SIM; then
  # Calibrated once, before any cluster starts, with the threads a worker
  # gets; the predictions come from this frozen profile.
  PROFILE=$OUT_DIR/sessions${TAG}_profile.txt
  echo "[sessions] calibrating the device profile ($threads threads; load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$BUILD/bin/ced-sim-calibrate" \
    --model "$work/small" --prompts 512,1024,2048 --batches 1,2 --reps 5 --kv-cache-mb "$KVMB" \
    --out "$PROFILE" 2>"$work/calibrate.log" || { cat "$work/calibrate.log" >&2; exit 1; }
  sed -i "s|$work/|WORK/|g" "$PROFILE"  # the model's folder, not this run's temporary path
fi
# Every repetition's trace on every target, by the simulator on profile $1;
# the files are named after $2.
predict() {
  for r in $(seq "$REPS"); do
    for i in 0 1 2 3; do
      "$BUILD/bin/ced-sim" --workload agent --preset "${models[$i]}" --device-profile "$1" \
        --instances 2 --prefill-instances 1 --prefill-gpus 1 --decode-gpus 1 --colocated \
        --ced-replay-on auto --sessions "$SESSIONS" --turns "$TURNS" \
        --first-prompt-tokens "$FIRST" --tool-result-mean "$TOOL" --tool-result-cv 0 \
        --output-tokens "$OUTPUT" --think-time-ms "$THINK" --kv-cache-mb "$KVMB" \
        --prefix-cache="${caches[$i]}" --held-sequences "$HELD" --seed $(( SEED + r )) \
        --json-out "$OUT_DIR/sessions${TAG}_run${r}_sim_$2_${names[$i]}.json" >/dev/null
    done
  done
  echo "[sessions] predictions ($2) written from $1" >&2
}
$SIM && predict "$PROFILE" calibrated
targets=""
for i in 0 1 2 3; do
  # Only one cluster computes at a time (the load generator runs the targets
  # one after the other), so every worker gets all cores, as a dedicated
  # instance has (`ced cluster` alone would split the cores among workers).
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$CED" cluster --model "$work/${models[$i]}" \
    --prefill 1 --decode 1 --base-port 0 --metrics-base-port 0 --http false \
    --kv-cache-mb "$KVMB" --prefix-cache="${caches[$i]}" --held-sequences "$HELD" \
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
if $SIM; then
  # The probe: 1,024-token prompts one at a time on the idle CED cluster (the
  # first warms up), its prefill worker's time against the calibration's
  # in-process prefill of 1,024 tokens.
  gw=$(awk '$1 == "gateway" {sub("grpc=", "", $2); print $2}' "$work/ready_ced-cache")
  "$LOADGEN" --target "$gw" --concurrency 1 --num-requests 5 --duration-s 0 --input-mean 1024 \
    --input-cv 0 --output-mean 2 --output-cv 0 --seed 77 --json-out "$work/probe.json" \
    --json-requests >/dev/null 2>"$work/probe.log"
  "$PY" - "$work/probe.json" "$PROFILE" "$OUT_DIR/sessions${TAG}_profile_probe.txt" <<'PYEOF'
import json, re, statistics, sys
probe, profile, out = sys.argv[1:]
recs = json.load(open(probe))["runs"][0]["requests"][1:]
cluster = statistics.median(r["server_ms"]["prefill"] for r in recs
                            if r["outcome"] == "OK" and "server_ms" in r)
text = open(profile).read()
inproc = float(re.search(r"# prefill\s+1024 tokens: measured ([0-9.]+) ms", text).group(1))
f = max(1.0, cluster / inproc)
lines = []
for line in text.splitlines():
    key = line.split("#")[0].split()
    if len(key) == 2 and key[0] in ("peak_flops", "attention_flops_per_s"):
        line = f"{key[0]} {float(key[1]) / f:.9g}  # probe: / {f:.4f}"
    elif len(key) == 2 and key[0] in ("prefill_step_s", "prefill_token_s"):
        line = f"{key[0]} {float(key[1]) * f:.9g}  # probe: x {f:.4f}"
    lines.append(line)
lines.append(f"# probe: a 1,024-token prefill in the cluster took {cluster:.1f} ms (median of "
             f"{len(recs)}), in process {inproc:.1f} ms: the prefill rates / {f:.4f}")
open(out, "w").write("\n".join(lines) + "\n")
print(f"[sessions] probe: prefill of 1,024 tokens {cluster:.1f} ms in the cluster, {inproc:.1f} ms in process (x {f:.3f})", file=sys.stderr)
PYEOF
  predict "$OUT_DIR/sessions${TAG}_profile_probe.txt" probe
fi
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
if $SIM; then
  pairs=()
  for kind in calibrated probe; do
    for r in $(seq "$REPS"); do
      for i in 0 1 2 3; do
        pairs+=("$OUT_DIR/sessions${TAG}_run$r.json:${names[$i]}=$OUT_DIR/sessions${TAG}_run${r}_sim_${kind}_${names[$i]}.json")
      done
    done
  done
  "$PY" bench/system/sessions_sim_compare.py --md "$OUT_DIR/sessions${TAG}_sim.md" "${pairs[@]}"
fi
