#!/usr/bin/env bash
# Fidelity of ced-sim against the real system: calibrates a CPU device
# profile of this machine (ced-sim-calibrate), starts the local cluster of
# `ced cluster` (1 prefill + 1 decode worker, CPU), measures the per-request
# path latency with a short probe, then for a light and a moderate load runs
# the load generator on the cluster and the simulator on the same workload
# and seed, and writes predicted vs measured TTFT / TPOT p50 / p90 to
# bench/results/fidelity.md (or $OUT).
#
# Usage: bench/sim/fidelity.sh [BUILD_DIR]     (default: build)
# Needs BUILD_DIR/bin/{ced,ced-loadgen,ced-sim,ced-sim-calibrate} and
# /usr/bin/python3. Takes about 7 minutes. Knobs (environment): PRESET
# (small), RATES ("0.5 1.5"), REQUESTS ("60 120"), INPUT_MEAN (512),
# OUTPUT_MEAN (32), SEED (1), OUT, KEEP (a folder to copy the run's files
# into: profile, per-request records of both sides, logs, scrapes).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
BIN=$BUILD/bin
PRESET=${PRESET:-small}
RATES=(${RATES:-0.5 1.5})
REQUESTS=(${REQUESTS:-60 120})
INPUT_MEAN=${INPUT_MEAN:-512}
OUTPUT_MEAN=${OUTPUT_MEAN:-32}
SEED=${SEED:-1}
OUT=${OUT:-bench/results/fidelity.md}
PY=/usr/bin/python3
for b in ced ced-loadgen ced-sim ced-sim-calibrate; do
  [[ -x $BIN/$b ]] || { echo "fidelity.sh: $BIN/$b not built (ninja -C $BUILD $b)" >&2; exit 2; }
done
[[ -x $PY ]] || { echo "fidelity.sh: needs $PY" >&2; exit 2; }
[[ ${#RATES[@]} == "${#REQUESTS[@]}" ]] || { echo "fidelity.sh: RATES and REQUESTS differ in length" >&2; exit 2; }

WORK=$(mktemp -d)
CLUSTER_PID=""
cleanup() {
  if [[ -n $CLUSTER_PID ]] && kill -0 "$CLUSTER_PID" 2>/dev/null; then
    kill -TERM "$CLUSTER_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$CLUSTER_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$CLUSTER_PID" 2>/dev/null || true
  fi
  if [[ -n ${KEEP:-} ]]; then
    mkdir -p "$KEEP"
    find "$WORK" -maxdepth 1 -type f -exec cp {} "$KEEP"/ \; 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "[fidelity] $*" >&2; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# Each worker of `ced cluster` gets cores / workers OpenMP threads, passive waits.
CORES=$(nproc)
THREADS=$(( CORES / 2 > 0 ? CORES / 2 : 1 ))
export OMP_WAIT_POLICY=passive

log "model $PRESET"
"$BIN/ced" model make --preset "$PRESET" --seed 1 --out "$WORK/model" >/dev/null
LOAD_START=$(loadavg)

log "calibrating ($THREADS thread(s) per worker)"
OMP_NUM_THREADS=$THREADS "$BIN/ced-sim-calibrate" --model "$WORK/model" --out "$WORK/profile.txt" \
  --prompts "128,$INPUT_MEAN,$(( INPUT_MEAN * 2 ))" --batches 1,4,8 --context "$INPUT_MEAN" 2>"$WORK/calibrate.log"

log "starting the cluster"
# Its own session, as a server apart from its client (and, where the kernel
# groups scheduling by session, not sharing the load generator's group).
setsid "$BIN/ced" cluster --model "$WORK/model" --base-port 0 --metrics-base-port 0 \
  --ready-file "$WORK/ready" >"$WORK/cluster.log" 2>&1 &
CLUSTER_PID=$!
for _ in $(seq 900); do
  [[ -s $WORK/ready ]] && break
  kill -0 "$CLUSTER_PID" 2>/dev/null || { cat "$WORK/cluster.log" >&2; exit 1; }
  sleep 0.2
done
[[ -s $WORK/ready ]] || { echo "fidelity.sh: the cluster did not become ready" >&2; exit 1; }
GATEWAY=$(sed -n 's/^gateway grpc=\([^ ]*\).*/\1/p' "$WORK/ready")
DECODE_METRICS=$(sed -n 's/^decode-0 .*metrics=\([^ ]*\).*/\1/p' "$WORK/ready")
log "gateway $GATEWAY"
# The decode worker's metrics (step time and batch histograms), for the report.
scrape() {
  $PY -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://" + sys.argv[1] + "/metrics", timeout=10).read().decode())' \
    "$DECODE_METRICS" >"$1" 2>/dev/null || : >"$1"
}

# Path latency (gateway, router, Reserve, RPC hops and relays): TTFT minus the
# prefill worker's compute, over a probe of short prompts one at a time (a
# different seed and shape than the measured runs). It also warms the cluster.
"$BIN/ced-loadgen" --target "$GATEWAY" --concurrency 1 --num-requests 14 --duration-s 0 \
  --input-mean 16 --input-cv 0 --output-mean 8 --output-cv 0 --seed 99 \
  --json-out "$WORK/probe.json" --json-requests >/dev/null 2>"$WORK/probe.log"
REQUEST_MS=$($PY - "$WORK/probe.json" <<'PYEOF'
import json, sys, statistics
recs = json.load(open(sys.argv[1]))["runs"][0]["requests"][4:]
vals = [r["ttft_ms"] - r["server_ms"]["prefill"] for r in recs
        if r["outcome"] == "OK" and "server_ms" in r and "ttft_ms" in r]
print("%.4f" % statistics.median(vals))
PYEOF
)
echo "request_s $($PY -c "print($REQUEST_MS / 1e3)")  # path latency probe, appended by fidelity.sh" >>"$WORK/profile.txt"
log "path latency $REQUEST_MS ms"

# The colocation slowdowns as the cluster has them: ced-sim-calibrate measures
# two engines on two threads of one process, but in the cluster the workers
# also share the cores with the K/V transfer, the token relays and the other
# services. A decode stream (one prompt of the mean length, 300 output tokens)
# runs alone, six prompts of the mean length with one output token run alone,
# then both together (the prompts start once the stream decodes), three rounds
# (medians of the rounds' ratios). Prefill
# slowdown: the prompts' prefill compute together over alone (medians).
# Decode slowdown: the stream's TPOT together over alone, the excess divided
# by the share of its decode that overlapped a prefill compute. The prefill's
# replaces the in-process measurement in the profile when larger; the decode's
# is only recorded: its estimate divides a TPOT difference of a few tenths of a
# millisecond (the noise between two 300-token streams here) by an overlap of
# about one half, and came out anywhere from 1.0 to 1.5 across runs.
overlap_gen() {  # NAME SEED OUTPUT COUNT
  "$BIN/ced-loadgen" --target "$GATEWAY" --concurrency 1 --num-requests "$4" --duration-s 0 \
    --input-mean "$INPUT_MEAN" --input-cv 0 --output-mean "$3" --output-cv 0 --seed "$2" \
    --json-out "$WORK/overlap_$1.json" --json-requests >/dev/null 2>"$WORK/overlap_$1.log"
}
OVERLAP_ROUNDS=3  # the machine's noise is of the effect's size: medians of paired rounds
for r in $(seq "$OVERLAP_ROUNDS"); do
  overlap_gen "stream_alone_$r" 97 300 1
  overlap_gen "prompts_alone_$r" 96 1 6
  overlap_gen "stream_together_$r" 97 300 1 &
  STREAM_PID=$!
  sleep 0.5
  overlap_gen "prompts_together_$r" 96 1 6
  wait "$STREAM_PID"
done
OVERLAP=$($PY - "$WORK" "$OVERLAP_ROUNDS" <<'PYEOF'
import json, statistics, sys
def recs(name):
    return [r for r in json.load(open(f"{sys.argv[1]}/overlap_{name}.json"))["runs"][0]["requests"]
            if r["outcome"] == "OK"]
rounds = []
for k in range(1, int(sys.argv[2]) + 1):
    alone = statistics.median(r["server_ms"]["prefill"] for r in recs(f"prompts_alone_{k}"))
    together = recs(f"prompts_together_{k}")
    with_ = statistics.median(r["server_ms"]["prefill"] for r in together)
    tpot_alone = recs(f"stream_alone_{k}")[0]["tpot_ms"]
    stream = recs(f"stream_together_{k}")[0]
    decode_ms = stream["tpot_ms"] * (stream["output_tokens"] - 1)
    overlap = min(1.0, sum(r["server_ms"]["prefill"] for r in together) / decode_ms)
    s_dec = 1 + (stream["tpot_ms"] / tpot_alone - 1) / overlap if overlap > 0 else 1.0
    rounds.append((with_ / alone, s_dec, alone, with_, tpot_alone, stream["tpot_ms"], overlap))
med = [statistics.median(x[i] for x in rounds) for i in range(7)]
print("%.4f %.4f %.2f %.2f %.3f %.3f %.2f" % (max(1.0, med[0]), max(1.0, med[1]), *med[2:]))
PYEOF
)
read -r S_PRE S_DEC PF_ALONE PF_WITH TPOT_ALONE TPOT_WITH OVERLAP_SHARE <<<"$OVERLAP"
$PY - "$WORK/profile.txt" "$S_PRE" <<'PYEOF'
import sys
path, s_pre = sys.argv[1], float(sys.argv[2])
lines = open(path).read().splitlines()
out = []
for line in lines:
    parts = line.split("#")[0].split()
    if len(parts) == 2 and parts[0] == "prefill_colocated_slowdown" and s_pre > float(parts[1]):
        line = f"prefill_colocated_slowdown {s_pre:.6g}  # in the cluster; in-process {parts[1]}"
    out.append(line)
open(path, "w").write("\n".join(out) + "\n")
PYEOF
echo "# colocation in the cluster (medians of $OVERLAP_ROUNDS rounds): prefill $PF_ALONE ms alone, $PF_WITH ms beside a decode stream (x $S_PRE); stream TPOT $TPOT_ALONE ms alone, $TPOT_WITH ms with $OVERLAP_SHARE of its decode beside a prefill (x $S_DEC, recorded only)" >>"$WORK/profile.txt"
log "colocation in the cluster: prefill x $S_PRE ($PF_ALONE -> $PF_WITH ms), decode x $S_DEC (TPOT $TPOT_ALONE -> $TPOT_WITH ms, overlap $OVERLAP_SHARE)"

# The real decode loop's cost per step beyond the engine's step as calibrated
# in-process (scheduler iteration, per-token emission and relays, the K/V
# landing before the second token, and whatever makes the worker's own engine
# step differ): the TPOT of a probe of prompts of the mean length, one at a
# time (so the two workers never overlap: a separate seed and a fixed shape,
# not the measured runs), minus the simulator's for the same probe. The
# decode worker's mean step over the probe is noted too. It runs right before
# each load, so that the speed this shared machine has at the time (it drifts
# by 10-20% over minutes) is the one the load's prediction starts from: the
# probe's prefill compute over the profile's also scales the profile's prefill
# rates for that load, and a probe TPOT below the simulator's its decode rates. Load i's profile is profile_load_i.txt, and profile.txt
# records each addition.
cp "$WORK/profile.txt" "$WORK/profile_base.txt"
decode_probe() {
  local i=$1 label=$2
  scrape "$WORK/decode_probe_before_$i.prom"
  "$BIN/ced-loadgen" --target "$GATEWAY" --concurrency 1 --num-requests 10 --duration-s 0 \
    --input-mean "$INPUT_MEAN" --input-cv 0 --output-mean 16 --output-cv 0 --seed 98 \
    --json-out "$WORK/probe_decode_$i.json" --json-requests >/dev/null 2>"$WORK/probe_decode_$i.log"
  scrape "$WORK/decode_probe_after_$i.prom"
  local step_ms
  step_ms=$($PY - "$WORK/decode_probe_before_$i.prom" "$WORK/decode_probe_after_$i.prom" <<'PYEOF'
import re, sys
def sums(path):
    out = {}
    for line in open(path):
        m = re.match(r"^(ced_decode_step_seconds_(?:sum|count))\s+(\S+)$", line.strip())
        if m:
            out[m.group(1)] = float(m.group(2))
    return out
b, a = sums(sys.argv[1]), sums(sys.argv[2])
n = a.get("ced_decode_step_seconds_count", 0) - b.get("ced_decode_step_seconds_count", 0)
s = a.get("ced_decode_step_seconds_sum", 0) - b.get("ced_decode_step_seconds_sum", 0)
print("%.4f" % (1e3 * s / n) if n > 0 else "nan")
PYEOF
)
  "$BIN/ced-sim" --preset "$PRESET" --device-profile "$WORK/profile_base.txt" --instances 2 \
    --prefill-instances 1 --prefill-gpus 1 --decode-gpus 1 --colocated --rate 0.01 --requests 10 \
    --input-mean "$INPUT_MEAN" --input-cv 0 --output-mean 16 --output-cv 0 --seed 98 \
    --ttft-slo-ms 1000 --requests-out "$WORK/probe_sim_$i.csv" >/dev/null
  local out
  out=$($PY - "$WORK/probe_decode_$i.json" "$WORK/probe_sim_$i.csv" "$WORK/profile_base.txt" <<'PYEOF'
import csv, json, sys, statistics
recs = json.load(open(sys.argv[1]))["runs"][0]["requests"][2:]
ok = [r for r in recs if r["outcome"] == "OK"]
sims = list(csv.DictReader(open(sys.argv[2])))
meas = statistics.median(r["tpot_ms"] for r in ok if "tpot_ms" in r)
sim = statistics.median(1e3 * float(r["tpot_s"]) for r in sims)
# The prefill worker's compute for these prompts (alone on the machine, as
# when calibrated) over the simulator's prefill step: the machine's drift since.
meas_pf = statistics.median(r["server_ms"]["prefill"] for r in ok if "server_ms" in r)
sim_pf = statistics.median(1e3 * float(r["prefill_s"]) for r in sims)
base = 0.0
for line in open(sys.argv[3]):
    parts = line.split("#")[0].split()
    if len(parts) == 2 and parts[0] == "decode_step_s":
        base = float(parts[1])
# Above the simulator's: the loop's own cost per step, added to decode_step_s.
# Below it: the machine runs faster than calibrated (the loop cannot beat the
# engine step it runs), so the decode rates scale by the ratio instead.
f_dec = min(1.0, meas / sim)
print("%.9g %.4f %.4f %.4f %.4f %.4f %.4f" % (base * f_dec + max(0.0, meas - sim) / 1e3, meas,
                                             sim, meas_pf / sim_pf, meas_pf, sim_pf, f_dec))
PYEOF
)
  local step_s tpot_ms sim_ms f_pre pf_ms sim_pf_ms f_dec
  read -r step_s tpot_ms sim_ms f_pre pf_ms sim_pf_ms f_dec <<<"$out"
  local note="+ probe TPOT $tpot_ms ms - simulated $sim_ms ms (${INPUT_MEAN}-token prompts; the worker's mean step $step_ms ms)"
  local drift_note="prefill rates / $f_pre (the probe's prefill compute $pf_ms ms vs the profile's $sim_pf_ms ms), decode rates / $f_dec"
  $PY bench/sim/fidelity_report.py scale-drift "$WORK/profile_base.txt" \
    "$WORK/profile_load_$i.txt" "$f_pre" "$f_dec"
  echo "decode_step_s $step_s  # $note, appended by fidelity.sh" >>"$WORK/profile_load_$i.txt"
  echo "# before the $label load: decode_step_s $step_s  # $note" >>"$WORK/profile.txt"
  echo "# before the $label load: $drift_note" >>"$WORK/profile.txt"
  log "before the $label load: probe TPOT $tpot_ms ms, simulated $sim_ms ms, worker step $step_ms ms; $drift_note"
}

SIM_COMMON=(--preset "$PRESET" --device-profile "$WORK/profile.txt" --instances 2
  --prefill-instances 1 --prefill-gpus 1 --decode-gpus 1 --ced-replay-on auto
  --heartbeat-ms 1000 --max-batch 64 --colocated
  --input-mean "$INPUT_MEAN" --output-mean "$OUTPUT_MEAN" --seed "$SEED"
  --ttft-slo-ms 1000 --tpot-slo-ms 50)
LOADS=()
for i in "${!RATES[@]}"; do
  rate=${RATES[$i]}; n=${REQUESTS[$i]}
  decode_probe "$i" "$rate req/s"
  sim_load=("${SIM_COMMON[@]}")
  sim_load[3]="$WORK/profile_load_$i.txt"
  before=$(loadavg)
  scrape "$WORK/decode_before_$i.prom"
  log "load $rate req/s, $n requests (load average $before)"
  "$BIN/ced-loadgen" --target "$GATEWAY" --rate "$rate" --num-requests "$n" --duration-s 0 \
    --input-mean "$INPUT_MEAN" --output-mean "$OUTPUT_MEAN" --seed "$SEED" \
    --slo-ttft-ms 1000 --slo-tpot-ms 50 --timeout-s 120 \
    --json-out "$WORK/measured_$i.json" --json-requests >/dev/null 2>"$WORK/loadgen_$i.log"
  after=$(loadavg)
  scrape "$WORK/decode_after_$i.prom"
  "$BIN/ced-sim" "${sim_load[@]}" --rate "$rate" --requests "$n" \
    --requests-out "$WORK/sim_$i.csv" >"$WORK/sim_$i.txt"
  # Diagnostic: the same with the profile slowed by the run's measured slowdown.
  factor=$($PY bench/sim/fidelity_report.py scale "$WORK/measured_$i.json" "$WORK/sim_$i.csv" \
    "$WORK/profile_load_$i.txt" "$WORK/profile_$i.txt")
  sim_adj=("${SIM_COMMON[@]}")
  sim_adj[3]="$WORK/profile_$i.txt"
  "$BIN/ced-sim" "${sim_adj[@]}" --rate "$rate" --requests "$n" \
    --requests-out "$WORK/sim_adj_$i.csv" >"$WORK/sim_adj_$i.txt"
  # Diagnostic: the same without colocation (two instances apart).
  sim_apart=()
  for x in "${sim_load[@]}"; do [[ $x == --colocated ]] || sim_apart+=("$x"); done
  "$BIN/ced-sim" "${sim_apart[@]}" --rate "$rate" --requests "$n" \
    --requests-out "$WORK/sim_apart_$i.csv" >"$WORK/sim_apart_$i.txt"
  log "slowdown f = $factor"
  LOADS+=("$rate,$n,$WORK/measured_$i.json,$WORK/sim_$i.csv,$WORK/sim_adj_$i.csv,$factor,$before,$after,$WORK/decode_before_$i.prom,$WORK/decode_after_$i.prom,$WORK/sim_apart_$i.csv")
done
LOAD_END=$(loadavg)

$PY bench/sim/fidelity_report.py --out "$OUT" --profile "$WORK/profile.txt" \
  --preset "$PRESET" --input-mean "$INPUT_MEAN" --output-mean "$OUTPUT_MEAN" --seed "$SEED" \
  --cores "$CORES" --threads "$THREADS" --request-ms "$REQUEST_MS" \
  --load-start "$LOAD_START" --load-end "$LOAD_END" \
  --sim-command "ced-sim $(echo "${SIM_COMMON[*]}" | sed "s|$WORK/profile.txt|PROFILE|")" \
  "${LOADS[@]}"
log "wrote $OUT"
