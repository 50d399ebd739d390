#!/usr/bin/env bash
# OpenAI `n` > 1 against n = 1 on the same cluster: the choices of one request
# share the prompt's K/V through the prefix cache, so n = 4 should cost little
# more than n = 1. Every request is listed.
#
# Usage: bench/system/openai_choices.sh [--build DIR] [--reps R] [--tokens T] [--out FILE]
#   defaults: --build build --reps 3 --tokens 2048 --out bench/results/openai_choices.md
# A `ced cluster` on `small` (seed 1; 1 prefill + 1 decode worker, defaults,
# --access-log), then R pairs of non-streamed POST /v1/completions, n = 1 then
# n = 4, each with a fresh prompt of T random token ids, max_tokens 16,
# temperature 0.8, ignore_eos; the client times each request; the cached
# tokens and placements of every choice come from the access log.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build REPS=3 TOKENS=2048 OUT=bench/results/openai_choices.md
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "openai_choices.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
CED=$BUILD/bin/ced
[[ -x $CED ]] || { echo "openai_choices.sh: $CED not built (bash scripts/build.sh)" >&2; exit 2; }
PY=/usr/bin/python3
work=$(mktemp -d)
cluster_pid=""
cleanup() {
  [[ -n $cluster_pid ]] && kill "$cluster_pid" 2>/dev/null && wait "$cluster_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$CED" model make --preset small --seed 1 --out "$work/small" >/dev/null
"$CED" cluster --model "$work/small" --base-port 0 --metrics-base-port 0 \
  --access-log "$work/access.log" --ready-file "$work/ready" >"$work/cluster.log" 2>&1 &
cluster_pid=$!
for _ in $(seq 120); do [[ -s $work/ready ]] && break; sleep 0.5; done
[[ -s $work/ready ]] || { cat "$work/cluster.log" >&2; echo "cluster did not start" >&2; exit 1; }
http=$(awk '$1 == "gateway" {for (i = 2; i <= NF; i++) if ($i ~ /^http=/) {sub("http=", "", $i); print $i}}' "$work/ready")
isa=$("$CED" model info --preset tiny 2>/dev/null | sed -n "s/^cpu kernels: \([a-z0-9]*\).*/\1/p" | head -1)
$PY - "$http" "$REPS" "$TOKENS" "$work/access.log" "$OUT" "$isa" <<'EOF'
import datetime, json, os, random, sys, time, urllib.request
http, reps, tokens, log, out, isa = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rng = random.Random()
runs = []
for rep in range(reps):
    for n in (1, 4):
        body = json.dumps({"model": "small", "prompt": [rng.randrange(3, 250) for _ in range(tokens)],
                           "max_tokens": 16, "n": n, "temperature": 0.8, "ignore_eos": True}).encode()
        t = time.time()
        req = urllib.request.Request(f"http://{http}/v1/completions", body, {"Content-Type": "application/json"})
        r = json.load(urllib.request.urlopen(req, timeout=300))
        ms = 1000 * (time.time() - t)
        runs.append((n, ms, r["id"].split("-", 1)[1], len(r["choices"])))
        print(f"n={n}: {ms:.0f} ms", file=sys.stderr)
time.sleep(0.5)
lines = [json.loads(l) for l in open(log)]
rows = []
for i, (n, ms, rid, choices) in enumerate(runs, 1):
    mine = {l["request_id"]: l for l in lines if l["request_id"] == rid or l["request_id"].startswith(rid + "-")}
    first = mine.get(rid) or mine.get(rid + "-0")
    rest = [mine[k] for k in sorted(mine) if k.startswith(rid + "-") and not k.endswith("-0")]
    others = "—" if not rest else ", ".join(f"{l['cached_prompt_tokens']:,} on {l['prefill_worker']}" for l in rest)
    rows.append(f"| {i} | {n} | {ms:,.0f} | {first['cached_prompt_tokens']:,} / {first['prefill_worker']} / "
                f"{first['ttft_ms']:,.0f} | {others} |")
with open(out, "a") as f:
    f.write(f"\n## Run of {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC\n\n")
    f.write(f"- Command: `bench/system/openai_choices.sh --reps {reps} --tokens {tokens}`\n")
    f.write(f"- CPU: {cpu}, {os.cpu_count()} logical cores, kernels `{isa}`\n\n")
    f.write("| request | n | total, ms | choice 0: cached / prefilled on / TTFT ms | choices 1-3: cached tokens, prefilled on |\n")
    f.write("|---|---|---:|---|---|\n")
    f.write("\n".join(rows) + "\n")
print(f"wrote {out}", file=sys.stderr)
EOF
