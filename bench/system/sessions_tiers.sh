#!/usr/bin/env bash
# Agent sessions on `small`, the two issue-16 measurements sessions.sh lacks,
# each side by side in one run:
#   --part tiers    TTFT of turns >= 2 when the hot prefix cache cannot hold
#                   the sessions, so their prefixes come back from the host /
#                   disk tier or from Redis, against recomputing; bytes each
#                   tier served (the workers' ced_kv_tier_* counters).
#   --part routing  prefix hit rate with 2 prefill + 2 decode workers under
#                   cache-aware routing against load-only routing.
#
# Usage: bench/system/sessions_tiers.sh --part tiers|routing [--build DIR]
#          [--sessions S] [--turns T] [--first N] [--tool N] [--output N]
#          [--think-ms MS] [--stagger-ms MS] [--recompute-sessions S] [--reps R]
#          [--seed N] [--hot-mb MB] [--host-mb MB] [--disk-mb MB]
#          [--targets LIST] [--redis-timeout-ms MS] [--flush] [--out-dir DIR] [--tag NAME]
#   defaults: --build build --turns 8 --first 1000 --tool 1000 --output 16
#             --reps 2 --seed 1 --out-dir bench/results;
#             tiers: --sessions 6 --think-ms 10000 --stagger-ms 2000
#             --recompute-sessions 1 --host-mb 256 --disk-mb 2048
#             --targets recompute,hot,hostdisk,redis;
#             routing: --sessions 4 --think-ms 500 (stagger think / S)
# tiers: four `ced cluster`s (1 prefill + 1 decode worker each) on small:
#   recompute  --prefix-cache=false (with --recompute-sessions = --sessions:
#              the hot cache of hostdisk / redis, see below)
#   hot        a KV cache that holds every session (the reference)
#   hostdisk   a hot cache of --hot-mb (default: 2.1 x the longest request)
#              + --kv-host-mb HOST-MB + --kv-disk-dir (tmp) --kv-disk-mb DISK-MB
#   redis      the same hot cache + --kv-store local (a private redis-server)
#   redis_t    as redis, with the workers' --kv-store-timeout-ms MS (which
#              `ced cluster` does not forward: router, workers, gateway and
#              redis-server started one by one); with --redis-timeout-ms MS
#              only, added to the targets
#   --flush: hostdisk and redis get the hot target's cache instead, and their
#   workers' prefix caches are flushed before every turn after a session's
#   first (ced-loadgen --flush-workers: FlushCache, waiting for the tiers'
#   writes, outside the TTFT), so every such turn finds its prefix only
#   below the hot cache, as after an operator's `ced client flush-cache`.
#   Without it: the hot cache of hostdisk / redis holds two requests (a worker refuses a
#   request its KV cannot hold; the gateway holds it until room frees, up to its
#   --kv-wait-ms), and S sessions whose
#   turns mostly take their turn (stagger >= a turn, think = (S-1) x stagger)
#   evict one another: once S x the previous prompt exceeds the hot cache
#   (turn 4 on with the defaults) the prefix of a turn comes mostly from
#   below it. recompute runs only the first --recompute-sessions sessions
#   with a 500 ms think time (the same token ids and lengths: the trace
#   depends on the seed, the session and the turn only) in a call of its own,
#   so that its long prefills do not queue behind one another; with
#   --recompute-sessions equal to --sessions it runs the very same trace as
#   the other targets (same concurrency, think time and stagger), which is
#   the like-for-like comparison: every target then queues the same way.
# routing: two `ced cluster --prefill 2 --decode 2`, --routing cache_aware and
#   --routing load, each worker's KV cache large enough for every session.
# Each repetition runs `ced-loadgen --workload agent` over the targets (one
# after the other, the same trace; the order reversed in even repetitions;
# repetition r uses seed + r) and scrapes every worker's /metrics before and
# after. Writes OUT_DIR/sessions_{tiers,routing}[_TAG]_run<r>.{json,md},
# ..._run<r>_metrics.json (counter deltas per worker, tier read/write seconds
# included), the SVG
# OUT_DIR/plots/sessions_{tiers,routing}[_TAG]_ttft.svg and prints a summary
# (sessions_plot.py --part tiers|routing).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART="" BUILD=build SESSIONS="" TURNS=8 FIRST=1000 TOOL=1000 OUTPUT=16 THINK="" STAGGER="" RECSESS=1 REPS=2 SEED=1
HOTMB=0 HOSTMB=256 DISKMB=2048 OUT_DIR=bench/results TAG="" TARGETS="" RTIMEOUT=0 FLUSH=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --part) PART=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --sessions) SESSIONS=$2; shift 2 ;;
    --turns) TURNS=$2; shift 2 ;;
    --first) FIRST=$2; shift 2 ;;
    --tool) TOOL=$2; shift 2 ;;
    --output) OUTPUT=$2; shift 2 ;;
    --think-ms) THINK=$2; shift 2 ;;
    --stagger-ms) STAGGER=$2; shift 2 ;;
    --recompute-sessions) RECSESS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --hot-mb) HOTMB=$2; shift 2 ;;
    --host-mb) HOSTMB=$2; shift 2 ;;
    --disk-mb) DISKMB=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    --redis-timeout-ms) RTIMEOUT=$2; shift 2 ;;
    --flush) FLUSH=1; shift ;;
    --out-dir) OUT_DIR=$2; shift 2 ;;
    --tag) TAG=_$2; shift 2 ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) echo "sessions_tiers.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $PART == tiers || $PART == routing ]] || { echo "sessions_tiers.sh: --part tiers|routing" >&2; exit 2; }
if [[ $PART == tiers ]]; then
  SESSIONS=${SESSIONS:-6} THINK=${THINK:-10000} STAGGER=${STAGGER:-2000}
  TARGETS=${TARGETS:-recompute,hot,hostdisk,redis}
  if (( RTIMEOUT > 0 )) && [[ ,$TARGETS, != *,redis_t,* ]]; then TARGETS+=,redis_t; fi
else
  SESSIONS=${SESSIONS:-4} THINK=${THINK:-500} STAGGER=${STAGGER:--1}
fi
CED=$BUILD/bin/ced
LOADGEN=$BUILD/bin/ced-loadgen
for b in "$CED" "$LOADGEN"; do
  [[ -x $b ]] || { echo "sessions_tiers.sh: $b not built (ninja -C $BUILD ced ced-loadgen)" >&2; exit 2; }
done
PY=/usr/bin/python3
# f32 K/V of small: 24 KiB a token, 384 KiB a 16-token block.
longest=$(( FIRST + (TURNS - 1) * (OUTPUT + TOOL) + OUTPUT ))
[[ $HOTMB == 0 ]] && HOTMB=$(( (longest * 24 * 21 / 10 + 1023) / 1024 ))
ALLMB=$(( (2 * SESSIONS * longest * 24 + 1023) / 1024 + 64 ))  # every session, twice over
# recompute: the KV cache of the tier targets when it runs their trace (the
# same memory, no prefix cache and no tiers: a worker holds as many requests
# at once as theirs); the all-sessions cache for its single-session run.
RECMB=$ALLMB
[[ $RECSESS == "$SESSIONS" ]] && RECMB=$HOTMB
# --flush: the tier targets keep every session in their hot cache between
# flushes, as the hot target does.
TIERMB=$HOTMB
(( FLUSH )) && TIERMB=$ALLMB
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
if [[ $PART == tiers ]]; then
  names=() args=()
  mkdir -p "$work/disk"
  for t in ${TARGETS//,/ }; do
    names+=("$t")
    case $t in
      recompute) args+=("--prefill 1 --decode 1 --kv-cache-mb $RECMB --prefix-cache=false") ;;
      hot) args+=("--prefill 1 --decode 1 --kv-cache-mb $ALLMB") ;;
      hostdisk) args+=("--prefill 1 --decode 1 --kv-cache-mb $TIERMB --kv-host-mb $HOSTMB --kv-disk-dir $work/disk --kv-disk-mb $DISKMB") ;;
      redis) args+=("--prefill 1 --decode 1 --kv-cache-mb $TIERMB --kv-store local --kv-store-mb $(( 2 * ALLMB ))") ;;
      redis_t) args+=(manual) ;;
      *) echo "sessions_tiers.sh: unknown target $t" >&2; exit 2 ;;
    esac
  done
  echo "[sessions_tiers] hot cache $TIERMB MiB (longest request $longest tokens), all-sessions cache $ALLMB MiB, host $HOSTMB MiB, disk $DISKMB MiB" >&2
else
  ALLMB=$(( (SESSIONS * longest * 24 + 1023) / 1024 + 64 ))  # every session, once
  names=(cache_aware load)
  args=("--prefill 2 --decode 2 --kv-cache-mb $ALLMB --routing cache_aware"
        "--prefill 2 --decode 2 --kv-cache-mb $ALLMB --routing load")
  echo "[sessions_tiers] 2 prefill + 2 decode workers per cluster, KV cache $ALLMB MiB per worker" >&2
fi
free_ports() {  # free_ports N: N free TCP ports on loopback
  "$PY" -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}
# redis_t: what `ced cluster --kv-store local` starts, one process at a time,
# with the workers' --kv-store-timeout-ms. Writes the ready file when the
# gateway answers.
start_manual() {  # start_manual NAME
  local name=$1 log=$work/cluster_$1.log P
  read -r -a P <<<"$(free_ports 10)"
  local h=127.0.0.1
  mkdir -p "$work/redis_$name"
  MALLOC_CONF=${MALLOC_CONF:-thp:always} redis-server --port "${P[9]}" --bind $h --dir "$work/redis_$name" --save "" --appendonly no \
    --maxmemory "$(( 2 * ALLMB ))mb" --maxmemory-policy allkeys-lru --daemonize no >>"$log" 2>&1 &
  pids+=($!)
  local tiers=(--kv-cache-mb "$TIERMB" --kv-store "redis://$h:${P[9]}" --kv-store-timeout-ms "$RTIMEOUT")
  "$CED" serve --role=router --listen $h:"${P[0]}" --metrics-listen $h:"${P[1]}" --replay-on auto \
    --replay-mode bounded --model "$work/small" --routing cache_aware >>"$log" 2>&1 &
  pids+=($!)
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$CED" serve --role=prefill --worker-id prefill-0 \
    --listen $h:"${P[2]}" --metrics-listen $h:"${P[3]}" --router $h:"${P[0]}" --model "$work/small" \
    --replay-capable "${tiers[@]}" >>"$log" 2>&1 &
  pids+=($!)
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$CED" serve --role=decode --worker-id decode-0 \
    --listen $h:"${P[4]}" --metrics-listen $h:"${P[5]}" --kv-listen $h:"${P[6]}" --router $h:"${P[0]}" \
    --model "$work/small" "${tiers[@]}" >>"$log" 2>&1 &
  pids+=($!)
  "$CED" serve --role=gateway --listen $h:"${P[7]}" --metrics-listen $h:"${P[8]}" --router $h:"${P[0]}" \
    --model "$work/small" >>"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 240); do
    curl -sf "http://$h:${P[5]}/metrics" >/dev/null && curl -sf "http://$h:${P[3]}/metrics" >/dev/null \
      && curl -sf "http://$h:${P[8]}/metrics" >/dev/null && break
    sleep 0.5
  done
  sleep 3  # registration with the router
  printf 'router grpc=%s metrics=%s\nprefill-0 grpc=%s metrics=%s\ndecode-0 grpc=%s metrics=%s kv=%s\ngateway grpc=%s metrics=%s\n' \
    $h:"${P[0]}" $h:"${P[1]}" $h:"${P[2]}" $h:"${P[3]}" $h:"${P[4]}" $h:"${P[5]}" $h:"${P[6]}" \
    $h:"${P[7]}" $h:"${P[8]}" >"$work/ready_$name"
}
n=${#names[@]}
for i in $(seq 0 $(( n - 1 ))); do
  if [[ ${args[$i]} == manual ]]; then start_manual "${names[$i]}"; continue; fi
  # Only one cluster computes at a time (the load generator runs the targets
  # one after the other), so every worker gets all cores.
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$CED" cluster --model "$work/small" \
    --base-port 0 --metrics-base-port 0 --http false ${args[$i]} \
    --ready-file "$work/ready_${names[$i]}" >"$work/cluster_${names[$i]}.log" 2>&1 &
  pids+=($!)
done
targets=()
for i in $(seq 0 $(( n - 1 ))); do
  f=$work/ready_${names[$i]}
  for _ in $(seq 240); do [[ -s $f ]] && break; sleep 0.5; done
  [[ -s $f ]] || { cat "$work/cluster_${names[$i]}.log" >&2; echo "cluster ${names[$i]} did not start" >&2; exit 1; }
  gw=$(awk '$1 == "gateway" {sub("grpc=", "", $2); print $2}' "$f")
  targets+=("${names[$i]}=$gw")
done
# Every worker's metrics address, as TARGET/WORKER=HOST:PORT.
scrape_list=""
for i in $(seq 0 $(( n - 1 ))); do
  while read -r name _ m _; do
    [[ $name == prefill-* || $name == decode-* ]] || continue
    scrape_list+="${scrape_list:+,}${names[$i]}/$name=${m#metrics=}"
  done <"$work/ready_${names[$i]}"
done
scrape() {  # scrape OUT.json
  "$PY" - "$scrape_list" "$1" <<'EOF'
import json, re, sys, urllib.request
want = re.compile(r'^(ced_kv_tier_\w+_total|ced_prefix_cache_\w+_total|ced_kv_tier_resident_bytes|ced_kv_tier_(?:read|write)_seconds_(?:sum|count))(\{[^}]*\})? ([0-9.eE+-]+)$')
out = {}
for item in sys.argv[1].split(","):
    key, addr = item.split("=", 1)
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    vals = {}
    for line in text.splitlines():
        m = want.match(line)
        if m:
            vals[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    out[key] = vals
json.dump(out, open(sys.argv[2], "w"), indent=1, sort_keys=True)
EOF
}
all_targets=$(IFS=,; echo "${targets[*]}")
# --flush: every tier target's workers, as LABEL=ADDR+ADDR for ced-loadgen.
flush_args=()
if (( FLUSH )); then
  flush=""
  for i in $(seq 0 $(( n - 1 ))); do
    [[ ${names[$i]} == hostdisk || ${names[$i]} == redis* ]] || continue
    ws=$(awk '$1 ~ /^(prefill|decode)-/ {sub("grpc=", "", $2); print $2}' "$work/ready_${names[$i]}" | paste -sd+)
    flush+="${flush:+,}${names[$i]}=$ws"
  done
  [[ -n $flush ]] && flush_args=(--flush-workers "$flush")
  echo "[sessions_tiers] flushing before every turn >= 2: $flush" >&2
fi
echo "[sessions_tiers] targets $all_targets; $threads threads per worker" >&2
# Warm-up: one short turn per cluster (weights packed on first use).
"$LOADGEN" --workload agent --target "$all_targets" --sessions 1 --turns 1 --first-prompt-tokens 64 \
  --output-tokens 2 --seed 999999 --timeout-s 600 --md-out "$work/warmup.md" 2>/dev/null
mkdir -p "$OUT_DIR/plots"
runs=()
agent() {  # agent TARGETS SESSIONS OUT_BASE [THINK_MS]
  "$LOADGEN" --workload agent --target "$1" --sessions "$2" --turns "$TURNS" \
    --first-prompt-tokens "$FIRST" --tool-result-mean "$TOOL" --tool-result-cv 0 \
    --output-tokens "$OUTPUT" --think-time-ms "${4:-$THINK}" --session-stagger-ms "$STAGGER" \
    --seed $(( SEED + r )) --timeout-s 900 --json-requests --json-out "$3.json" --md-out "$3.md" \
    "${flush_args[@]}"
}
for r in $(seq "$REPS"); do
  order=("${targets[@]}")
  if (( r % 2 == 0 )); then mapfile -t order < <(printf '%s\n' "${targets[@]}" | tac); fi
  base=$OUT_DIR/sessions_${PART}${TAG}_run$r
  echo "[sessions_tiers] repetition $r of $REPS, order ${order[*]} ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  scrape "$work/before.json"
  # tiers: recompute in a call of its own with fewer sessions; first or last.
  rest=$(printf '%s\n' "${order[@]}" | { grep -v '^recompute=' || true; } | paste -sd,)
  rec=$(printf '%s\n' "${order[@]}" | { grep '^recompute=' || true; })
  # With --recompute-sessions = --sessions, recompute runs the same trace as
  # the others (same sessions, think time and stagger) in the same call.
  if [[ $PART == tiers && -n $rec && -n $rest && $RECSESS != "$SESSIONS" ]]; then
    if [[ ${order[0]} == recompute=* ]]; then
      agent "$rec" "$RECSESS" "$work/a" 500; agent "$rest" "$SESSIONS" "$work/b"
    else
      agent "$rest" "$SESSIONS" "$work/a"; agent "$rec" "$RECSESS" "$work/b" 500
    fi
    "$PY" - "$work/a.json" "$work/b.json" "$base.json" <<'EOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
a["runs"] += b["runs"]
a["workload_calls"] = [a["workload"], b["workload"]]
json.dump(a, open(sys.argv[3], "w"), indent=1)
EOF
    cat "$work/a.md" "$work/b.md" >"$base.md"
  else
    agent "$(IFS=,; echo "${order[*]}")" "$SESSIONS" "$base"
  fi
  scrape "$work/after.json"
  "$PY" - "$work/before.json" "$work/after.json" "$base"_metrics.json <<'EOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
d = {w: {k: v - a.get(w, {}).get(k, 0.0) for k, v in vals.items()} for w, vals in b.items()}
json.dump(d, open(sys.argv[3], "w"), indent=1, sort_keys=True)
EOF
  runs+=("$base.json")
done
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
echo "[sessions_tiers] CPU: $cpu, $(nproc) cores; end $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$PY" bench/system/sessions_plot.py --svg "$OUT_DIR/plots/sessions_${PART}${TAG}_ttft.svg" \
  --part "$PART" "${runs[@]}"
