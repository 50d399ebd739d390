#!/usr/bin/env bash
# Bad flags of `ced serve --role=decode` and `ced up` are refused with exit 2 and
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
exit $fail
