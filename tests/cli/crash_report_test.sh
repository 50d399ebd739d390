#!/usr/bin/env bash
# A service that crashes leaves the signal and a stack that addr2line resolves
# in its log, and still dies of that signal (exit 128 + signal).
# Usage: crash_report_test.sh CED
set -u
ced=$1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail=0
for sig in SEGV ABRT; do
  "$ced" serve --role=router --listen 127.0.0.1:0 --metrics-listen= >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "listening" "$log" && break; sleep 0.1; done
  if ! grep -q "listening" "$log"; then
    echo "FAIL: the router did not start: $(cat "$log")"
    kill -KILL $pid
    exit 1
  fi
  kill -$sig $pid
  wait $pid
  rc=$?
  num=$(kill -l $sig)
  want=$((128 + num))
  if [[ $rc -ne $want ]]; then echo "FAIL: SIG$sig: exit $rc, want $want"; fail=1; fi
  if ! grep -q "^\*\*\* ced: .*(signal $num) at address .*; stack:" "$log"; then
    echo "FAIL: SIG$sig: no crash header in the log: $(cat "$log")"; fail=1
  fi
  if ! grep -q "^\*\*\* end of stack" "$log"; then echo "FAIL: SIG$sig: stack not ended"; fail=1; fi
  # The frames inside ced resolve to our functions: the handler and main.
  offsets=$(grep -o 'ced(+0x[0-9a-f]*)' "$log" | grep -o '0x[0-9a-f]*')
  names=$(for o in $offsets; do addr2line -Cfe "$ced" "$o" | head -1; done)
  for want_fn in OnCrash main; do
    if ! grep -qw "$want_fn" <<<"$names"; then
      echo "FAIL: SIG$sig: no frame resolves to $want_fn; frames: $names"; fail=1
    fi
  done
  [[ $fail -eq 0 ]] && echo "ok: SIG$sig -> exit $rc, $(grep -c 'ced(+0x' "$log") frames in ced"
done
exit $fail
