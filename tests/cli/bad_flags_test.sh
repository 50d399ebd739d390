#!/usr/bin/env bash
# Bad flags of `ced serve --role=decode|gateway`, `ced cluster` and `ced up` are refused with exit 2 and
# a message naming the flag, before anything starts.
# Usage: bad_flags_test.sh CED MODEL_DIR
set -u
ced=$1 model=$2
fail=0
# expect CODE PATTERN -- COMMAND...
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$(timeout 30 "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code ]] || ! grep -qF -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output: $out"
    fail=1
  else
    echo "ok: $* -> exit $rc: $(grep -F -- "$pattern" <<<"$out" | head -1)"
  fi
}
for bad in 0 -1 16777217 x; do
  expect 2 "--max-step-tokens must be in [1, 2^24]" -- \
    "$ced" serve --role=decode --model "$model" --max-step-tokens "$bad"
done
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
expect 2 "ced up: --model $empty has no model.safetensors" -- \
  env HOME="$empty" "$ced" up --model "$empty"
# A shape-only model (config.json alone) is refused before any worker starts.
"$ced" model make --preset tiny --shape-only --out "$empty/shape" >/dev/null
expect 2 "ced cluster: --model: $empty/shape: config.json but no model.safetensors: a shape-only model" -- \
  "$ced" cluster --model "$empty/shape" --base-port 0 --metrics-base-port 0
expect 1 "$empty/shape: config.json but no model.safetensors" -- \
  "$ced" generate --model "$empty/shape" --prompt hi
# The K/V cache budget: a range, and on the CPU no more than the machine's
# memory (with the host tier), refused before anything is allocated.
mem_mb=$(( $(getconf _PHYS_PAGES) * $(getconf PAGESIZE) / 1048576 ))
for role in prefill decode; do
  for bad in 0 -1 16777217; do
    expect 2 "--kv-cache-mb must be in [1, 2^24]" -- \
      "$ced" serve --role=$role --model "$model" --kv-cache-mb "$bad"
  done
  expect 2 "flag --kv-cache-mb: 'x' is not an integer" -- \
    "$ced" serve --role=$role --model "$model" --kv-cache-mb x
  expect 2 "--kv-cache-mb ($(( mem_mb + 1 ))) plus --kv-host-mb (0) is more than this machine's memory" -- \
    "$ced" serve --role=$role --model "$model" --kv-cache-mb $(( mem_mb + 1 ))
  expect 2 "--kv-cache-mb (1) plus --kv-host-mb ($mem_mb) is more than this machine's memory" -- \
    "$ced" serve --role=$role --model "$model" --kv-cache-mb 1 --kv-host-mb $mem_mb
done
half=$(( mem_mb / 2 + 1 ))
expect 2 "ced cluster: 2 workers x (--kv-cache-mb $half + --kv-host-mb 0) + the weights (" -- \
  "$ced" cluster --model "$model" --kv-cache-mb $half
expect 2 "MiB is more than this machine's memory ($mem_mb MiB" -- \
  "$ced" cluster --model "$model" --kv-cache-mb $half
# A router address that cannot be a peer is refused, not retried forever.
for role in prefill decode; do
  expect 2 "ced serve --role=$role: --router: 'bad' is not host:port" -- \
    "$ced" serve --role=$role --model "$model" --router bad
  expect 2 "ced serve --role=$role: --router: '127.0.0.1:0' needs a host and a port in 1-65535" -- \
    "$ced" serve --role=$role --model "$model" --router 127.0.0.1:0
done
expect 2 "--router: ':50051' needs a host and a port in 1-65535" -- \
  "$ced" serve --role=gateway --model "$model" --router :50051
expect 2 "--router: 'r:x' has no valid port (0-65535)" -- \
  "$ced" serve --role=gateway --model "$model" --router r:x
expect 2 "--router: 'http://127.0.0.1:50051' is a URL; give host:port (e.g. 127.0.0.1:50050)" -- \
  "$ced" serve --role=decode --model "$model" --router http://127.0.0.1:50051
# The client commands check the address they call before calling it (gRPC
# would answer a DNS error, or take a URL's scheme for a host name).
for sub in generate tokenize model-info; do
  expect 2 "ced client $sub: --gateway: 'http://127.0.0.1:50050' is a URL; give host:port" -- \
    "$ced" client $sub --gateway http://127.0.0.1:50050
  expect 2 "ced client $sub: --gateway: 'gw' is not host:port" -- "$ced" client $sub --gateway gw
done
for sub in drain flush-cache; do
  expect 2 "ced client $sub: --worker: 'w w:1' has a character a host cannot have (' ')" -- \
    "$ced" client $sub --worker "w w:1"
done
# Worker flags out of range name the flag and the range (they were cast to
# int unchecked: a negative drain, a reservation timeout of 0).
for role in prefill decode; do
  expect 2 "ced serve --role=$role: --drain-timeout-ms must be in [0, 3600000], got '-5'" -- \
    "$ced" serve --role=$role --model "$model" --drain-timeout-ms -5
  expect 2 "ced serve --role=$role: --advertise-address: 'bad' is not host:port" -- \
    "$ced" serve --role=$role --model "$model" --advertise-address bad
done
expect 2 "ced serve --role=decode: --reservation-timeout-ms must be in [1, 86400000], got '0'" -- \
  "$ced" serve --role=decode --model "$model" --reservation-timeout-ms 0
expect 2 "ced serve --role=decode: --max-batch must be in [1, 65536], got '100000'" -- \
  "$ced" serve --role=decode --model "$model" --max-batch 100000
expect 2 "ced serve --role=decode: --advertise-kv-address: 'http://x:1' is a URL" -- \
  "$ced" serve --role=decode --model "$model" --advertise-kv-address http://x:1
expect 2 "ced serve --role=prefill: --max-queued must be in [1, 1048576], got '99999999999'" -- \
  "$ced" serve --role=prefill --model "$model" --max-queued 99999999999
expect 2 "ced serve --role=prefill: --max-queued-tokens must be in [1, 1099511627776], got '0'" -- \
  "$ced" serve --role=prefill --model "$model" --max-queued-tokens 0
expect 2 "ced serve --role=prefill: --chunk must be in [1, 1048576], got '0'" -- \
  "$ced" serve --role=prefill --model "$model" --chunk 0
for bad in -1 3600001 x; do
  for wait in kv-wait-ms migration-wait-ms; do
    expect 2 "ced cluster: --$wait must be in [0, 3600000]" -- \
      "$ced" cluster --model "$model" --$wait $bad
    expect 2 "ced serve --role=gateway: --$wait must be in [0, 3600000]" -- \
      "$ced" serve --role=gateway --model "$model" --$wait $bad
  done
done
for bad in -1 1001 x; do
  expect 2 "ced cluster: --max-restarts must be in [0, 1000]" -- \
    "$ced" cluster --model "$model" --max-restarts $bad
done
# A logits dump path that cannot be written is refused before the run.
touch "$empty/not_a_dir"
expect 2 "ced generate: --dump-logits: cannot write '$empty/not_a_dir/l.json'" -- \
  "$ced" generate --model "$model" --prompt hi --dump-logits "$empty/not_a_dir/l.json"
# Sampling and chunk values are refused naming the flag, not the field.
expect 2 "ced generate: --chunk must be at least 1, got 0" -- \
  "$ced" generate --model "$model" --prompt hi --chunk 0
expect 2 "ced generate: --top-p must be in (0, 1], got 0" -- \
  "$ced" generate --model "$model" --prompt hi --top-p 0
expect 2 "ced generate: --temperature must be finite and >= 0, got -1" -- \
  "$ced" generate --model "$model" --prompt hi --temperature -1
expect 2 "ced model make: --seed must be >= 0, got -1" -- \
  "$ced" model make --preset tiny --seed -1 --out "$empty/never"
expect 2 "--max-inflight must be in [1, 2^20]" -- \
  "$ced" serve --role=gateway --model "$model" --max-inflight 100000000
for role in router gateway prefill decode; do
  expect 2 "--health-listen: 'x' is not host:port" -- \
    "$ced" serve --role=$role --model "$model" --health-listen x
done
: >"$empty/empty.jinja"
expect 1 "chat template: $empty/empty.jinja: the chat template file is empty" -- \
  "$ced" serve --role=gateway --model "$model" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --chat-template "$empty/empty.jinja"
# A ready file that cannot be written is refused before anything starts.
touch "$empty/a_file"
expect 2 "ced cluster: --ready-file: cannot write '$empty/a_file/r.tmp': Not a directory" -- \
  "$ced" cluster --model "$model" --ready-file "$empty/a_file/r"
expect 2 "ced cluster: --ready-file: '$empty' is a folder" -- \
  "$ced" cluster --model "$model" --ready-file "$empty"
# The shared KV tier's TLS files: only with rediss://, cert and key together,
# readable, and PEM (checked at start-up, before anything listens).
pem=$(mktemp)
echo "not a certificate" >"$pem"
serve=("$ced" serve --role=decode --model "$model" --listen 127.0.0.1:0)
expect 2 "--kv-store-tls-ca needs a rediss:// --kv-store" -- \
  "${serve[@]}" --kv-store redis://127.0.0.1:1 --kv-store-tls-ca "$pem"
expect 2 "--kv-store-tls-ca needs a rediss:// --kv-store" -- "${serve[@]}" --kv-store-tls-ca "$pem"
expect 2 "--kv-store-tls-ca: cannot read $empty/nope" -- \
  "${serve[@]}" --kv-store rediss://127.0.0.1:1 --kv-store-tls-ca "$empty/nope"
expect 2 "--kv-store-tls-cert and --kv-store-tls-key go together" -- \
  "${serve[@]}" --kv-store rediss://127.0.0.1:1 --kv-store-tls-cert "$pem"
expect 2 "--kv-store-tls-ca: no PEM CA certificate in $pem" -- \
  "${serve[@]}" --kv-store rediss://127.0.0.1:1 --kv-store-tls-ca "$pem"
expect 2 "ced cluster: --kv-store-tls-ca needs a rediss:// --kv-store" -- \
  "$ced" cluster --model "$model" --kv-store local --kv-store-tls-ca "$pem"
for bad in 0 60001 x; do
  expect 2 "ced cluster: --kv-store-timeout-ms must be in [1, 60000]" -- \
    "$ced" cluster --model "$model" --kv-store local --kv-store-timeout-ms "$bad"
done
# Forwarded to the gateway, checked before anything starts.
for bad in -1 17 x; do
  expect 2 "ced cluster: --reserve-retries must be in [0, 16]" -- \
    "$ced" cluster --model "$model" --reserve-retries "$bad"
  expect 2 "--reserve-retries must be in [0, 16]" -- \
    "$ced" up --model "$model" --reserve-retries "$bad"
  expect 2 "ced cluster: --migration-limit must be in [0, 16]" -- \
    "$ced" cluster --model "$model" --migration-limit "$bad"
done
for bad in 0 1048577 x; do
  expect 2 "--kv-tier-queue-mb must be in [1, 2^20]" -- "${serve[@]}" --kv-tier-queue-mb "$bad"
done
# Held sequences (both worker roles, and ced cluster, which passes it on).
for bad in -1 4097 x; do
  expect 2 "--held-sequences must be in [0, 4096]" -- "${serve[@]}" --held-sequences "$bad"
  expect 2 "--held-sequences must be in [0, 4096]" -- \
    "$ced" serve --role=prefill --model "$model" --listen 127.0.0.1:0 --held-sequences "$bad"
  expect 2 "ced cluster: --held-sequences must be in [0, 4096]" -- \
    "$ced" cluster --model "$model" --held-sequences "$bad"
done
# A boolean flag takes true/false (1/0, yes/no) only: a typo is not "false".
expect 2 "--decode-mux must be true or false (got 'flase')" -- \
  "$ced" serve --role=gateway --model "$model" --decode-mux=flase
# The router's flags, on `ced router` and (prefixed) on a gateway that embeds it.
expect 2 "--routing must be cache_aware or load" -- "$ced" serve --role=router --routing nearest
expect 2 "--max-sessions must be in [1, 2^30]" -- "$ced" serve --role=router --max-sessions 0
gw=("$ced" serve --role=gateway --model "$model" --listen 127.0.0.1:0 --metrics-listen "")
expect 2 "--router names a router elsewhere; with --embed-router" -- \
  "${gw[@]}" --embed-router --router 127.0.0.1:1
expect 2 "--router-routing must be cache_aware or load" -- \
  "${gw[@]}" --embed-router --router-routing nearest
expect 2 "--router-heartbeat-timeout-ms must be > 0" -- \
  "${gw[@]}" --embed-router --router-heartbeat-timeout-ms 0
expect 2 "--router-decode-cache-weight must be a number in [0, 1e6]" -- \
  "${gw[@]}" --embed-router --router-decode-cache-weight -1
expect 2 "--embed-router must be true or false (got 'sometimes')" -- \
  "$ced" cluster --model "$model" --embed-router=sometimes
# The first word of several commands alone, or with a wrong second word.
expect 2 "ced client: give a subcommand; one of: generate, tokenize" -- "$ced" client
expect 2 "ced model: unknown subcommand 'frob'; one of: make, info" -- "$ced" model frob
rm -f "$pem"
exit $fail
