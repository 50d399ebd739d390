#!/usr/bin/env bash
# Bad input to the agent-session benches (issue 16) is refused with the flag
# named, before anything runs: ced-loadgen --workload agent, ced-sim
# --workload agent, the engine bench's resume section, sessions.sh, the
# workers' --prefix-cache flag and ced-sim-calibrate's attention probe.
# Usage: agent_bad_flags_test.sh CED LOADGEN SIM ENGINE_BENCH SESSIONS_SCRIPT CALIBRATE
set -u
ced=$1 loadgen=$2 sim=$3 engine=$4 sessions=$5 calibrate=$6
fail=0
# expect [--line] CODE PATTERN -- COMMAND...: with --line, PATTERN is a
# whole line of the output, else a part of one.
expect() {
  local whole=
  if [[ $1 == --line ]]; then
    whole=x
    shift
  fi
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -q${whole}F -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output: $out"
    fail=1
  else
    echo "ok: $* -> exit $rc: $(grep -F -- "$pattern" <<<"$out" | head -1)"
  fi
}
# Nothing listens on port 1: every case must fail before connecting.
t=127.0.0.1:1
expect --line 2 "ced-loadgen: unknown flag --bogus (see --help)" -- "$loadgen" --bogus
expect 1 "--workload: expected poisson or agent" -- "$loadgen" --target $t --workload chat
expect 1 "--workload agent needs --api grpc" -- "$loadgen" --target $t --workload agent --api openai
expect 1 "--sessions and --turns must be in [1, 100000]" -- \
  "$loadgen" --target $t --workload agent --sessions 0
expect 1 "agent trace: tool_result_mean must be >= 1" -- \
  "$loadgen" --target $t --workload agent --tool-result-mean 0
expect 1 "--replay-mode: expected bounded or exact" -- \
  "$loadgen" --target $t --workload agent --replay-mode fast
expect 2 "--think-time-ms: bad value" -- "$loadgen" --workload agent --think-time-ms soon
expect 1 "--flush-workers: expected LABEL=ADDR+ADDR" -- \
  "$loadgen" --target a=$t --workload agent --flush-workers bogus
expect 1 "--flush-workers: no target labelled 'b' in --target" -- \
  "$loadgen" --target a=$t --workload agent --flush-workers b=127.0.0.1:2
expect 1 "--flush-workers: empty worker address for 'a'" -- \
  "$loadgen" --target a=$t --workload agent --flush-workers a=127.0.0.1:2+
expect 2 "--workload: expected poisson or agent" -- "$sim" --workload chat
expect 2 "--tpot-slo-ms must be > 0, got -1" -- "$sim" --preset tiny --rate 1 --tpot-slo-ms -1
expect 2 "--ttft-slo-ms must be >= 0 (0: from --ttft-slo-factor), got -1" -- \
  "$sim" --preset tiny --rate 1 --ttft-slo-ms -1
expect 2 "--ttft-slo-factor must be > 0, got 0" -- "$sim" --preset tiny --rate 1 --ttft-slo-factor 0
expect 2 "over max_position 8192" -- "$sim" --workload agent --preset small --turns 20 \
  --first-prompt-tokens 1000 --tool-result-mean 1000 --tool-result-cv 0
expect 2 "agent trace: sessions must be >= 1" -- "$sim" --workload agent --sessions 0
expect 2 "--routing: expected cache_aware or load, got 'bogus'" -- "$sim" --workload agent --routing=bogus
expect 2 "sim: reserve_retries must be >= 0" -- "$sim" --refuse-when-full --reserve-retries=-1
expect 2 "agent sim: reserve_retries must be >= 0" -- \
  "$sim" --workload agent --refuse-when-full --reserve-retries=-1
expect 2 "--json-out: cannot write '/nonexistent/sim.json'" -- \
  "$sim" --workload agent --sessions 1 --turns 1 --json-out /nonexistent/sim.json
expect 2 "--attention-context: must be >= 0" -- "$calibrate" --model /nonexistent --attention-context -1
expect 2 "--request-ms must be >= 0, got -1" -- "$calibrate" --model /nonexistent --request-ms -1
expect 2 "--link-gbps must be >= 0, got -1" -- "$calibrate" --model /nonexistent --link-gbps -1
expect 2 "--bandwidth-mb must be >= 1, got 0" -- "$calibrate" --model /nonexistent --bandwidth-mb 0
expect 2 "--name: '' must be one word (no spaces or '#')" -- "$calibrate" --model /nonexistent --name=
expect 2 "--name: 'a b' must be one word (no spaces or '#')" -- \
  "$calibrate" --model /nonexistent --name "a b"
# Refused as soon as the model's max_position is known, before any probe runs.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$ced" model make --preset tiny --seed 1 --out "$work/tiny" >/dev/null
expect 2 "--attention-context: 100000 + --chunk 256 exceeds the model's max_position" -- \
  "$calibrate" --model "$work/tiny" --attention-context 100000
expect 1 "--resume_cached: '2' is not a fraction in (0, 1]" -- \
  "$engine" --sections=resume --resume_cached=2
expect 1 "--resume_steps must be positive" -- "$engine" --sections=resume --resume_steps=0
# The numeric flags both workloads share, refused before connecting.
for wl in poisson agent; do
  expect 1 "--timeout-s must be > 0, got 0" -- "$loadgen" --target $t --workload $wl --timeout-s 0
  expect 1 "--temperature must be >= 0, got -1" -- \
    "$loadgen" --target $t --workload $wl --temperature -1
  expect 1 "--duration-s must be >= 0, got -1" -- \
    "$loadgen" --target $t --workload $wl --duration-s -1
  expect 1 "--num-requests must be >= 0, got -1" -- \
    "$loadgen" --target $t --workload $wl --num-requests -1
  expect 1 "--slo-ttft-ms must be >= 0, got -5" -- \
    "$loadgen" --target $t --workload $wl --slo-ttft-ms -5
  expect 1 "--slo-tpot-ms must be >= 0, got nan" -- \
    "$loadgen" --target $t --workload $wl --slo-tpot-ms nan
done
# An output path that cannot be written is refused before the run, not after
# it (the results would be lost), and no report file is left behind.
touch "$work/a_file"
expect 1 "--json-out: cannot write '$work/a_file/r.json': Not a directory" -- \
  "$loadgen" --target $t --num-requests 1 --json-out "$work/a_file/r.json"
expect 1 "--md-out: cannot write '$work': it is a folder" -- \
  "$loadgen" --target $t --num-requests 1 --md-out "$work"
expect 1 "--json-out: cannot write '$work/a_file/r.json': Not a directory" -- \
  "$loadgen" --target $t --workload agent --json-out "$work/a_file/r.json"
expect 2 "--out: cannot write '$work/a_file/p.txt': Not a directory" -- \
  "$calibrate" --model "$work/tiny" --out "$work/a_file/p.txt"
expect 1 "--json: cannot write '$work/a_file/e.json': Not a directory" -- \
  "$engine" --sections=resume --json="$work/a_file/e.json"
expect 1 "--markdown: cannot write '$work': it is a folder" -- \
  "$engine" --sections=resume --markdown="$work"
if [[ -n $(find "$work" -name 'r.json' -o -name 'e.json' -o -name 'p.txt') ]]; then
  echo "FAIL: a refused run left a report behind"
  fail=1
fi
expect 1 "--sections: unknown section 'resumes'" -- "$engine" --sections=resumes
expect 2 "unknown argument --bogus" -- bash "$sessions" --bogus
expect 2 "--held-sequences must be an integer >= 0, got '-1'" -- \
  bash "$sessions" --held-sequences -1
expect 2 "agent sim: held_sequences must be >= 0" -- \
  "$sim" --workload agent --held-sequences=-1
expect 2 "--prefix-cache must be true or false" -- "$ced" cluster --model /nonexistent --prefix-cache=maybe
expect 2 "--prefix-cache must be true or false" -- \
  "$ced" serve --role=prefill --model /nonexistent --prefix-cache=maybe
exit $fail
