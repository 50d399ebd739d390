#!/usr/bin/env bash
# Runs GoogleTest filters of test binaries repeatedly while busy loops hog
# every core, and reports failures per 100 runs of each filter.
#
#   tests/stress/stress_run.sh --binary PATH [--filter F]... [--binary PATH2 [--filter F]...]...
#       [--runs N] [--time-limit SECONDS] [--run-timeout SECONDS] [--hogs K] [--keep-logs DIR]
#
# Each --filter belongs to the --binary before it (a --binary with no filter
# runs all its tests).
# Every run is its own process (a crash is one failed run, not the end of the
# stress run). A run fails when it exits non-zero (a test failure, an abort or
# a signal, running past --run-timeout) or when its filter matches no test. The
# filters take turns (round robin) until each ran --runs times or --time-limit
# passed, so a cut-short stress run still covers every filter. The hogs (K busy
# loops; default: one per online CPU) are children of this script and are killed
# on exit, error or signal.
# Exit status: 0 if no run failed, 1 if one did, 2 for bad usage.
set -uo pipefail

binaries=()
cases=()  # "BINARY<TAB>FILTER"
runs=100
time_limit=600
run_timeout=120
hogs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
keep_logs=""

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --binary)
      [[ -x "$2" ]] || { echo "stress_run: --binary '$2' is not executable" >&2; exit 2; }
      binaries+=("$2"); shift 2 ;;
    --filter)
      [[ ${#binaries[@]} -gt 0 ]] || { echo "stress_run: --filter '$2' before any --binary" >&2; exit 2; }
      cases+=("${binaries[-1]}"$'\t'"$2"); shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --time-limit) time_limit=$2; shift 2 ;;
    --run-timeout) run_timeout=$2; shift 2 ;;
    --hogs) hogs=$2; shift 2 ;;
    --keep-logs) keep_logs=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "stress_run: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ ${#binaries[@]} -gt 0 ]] || { echo "stress_run: no --binary given" >&2; exit 2; }
for b in "${binaries[@]}"; do
  printf '%s\n' "${cases[@]}" | grep -q "^$b"$'\t' || cases+=("$b"$'\t'"*")
done
filters=("${cases[@]}")
for n in "$runs" "$time_limit" "$run_timeout" "$hogs"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "stress_run: '$n' is not a count" >&2; exit 2; }
done

workdir=$(mktemp -d)
hog_pids=()
cleanup() {
  for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${hog_pids[@]}"; do wait "$pid" 2>/dev/null; done
  hog_pids=()
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for ((i = 0; i < hogs; ++i)); do
  # A busy loop in its own bash: no I/O, no sleeping, only CPU.
  bash -c 'while :; do :; done' &
  hog_pids+=($!)
done

declare -A done_runs failures first_failure
for f in "${filters[@]}"; do
  done_runs[$f]=0
  failures[$f]=0
  first_failure[$f]=""
done

start=$SECONDS
cut_short=0
label() { local b=${1%%$'\t'*}; echo "$(basename "$b"):${1#*$'\t'}"; }
echo "stress_run: ${#binaries[@]} binary(ies), ${#filters[@]} filter(s) x ${runs} runs," \
  "${hogs} CPU hog(s) on $(getconf _NPROCESSORS_ONLN) CPU(s), limit ${time_limit}s"
for ((round = 0; round < runs; ++round)); do
  for f in "${filters[@]}"; do
    if ((SECONDS - start >= time_limit)); then
      cut_short=1
      break 2
    fi
    log="$workdir/run.log"
    # An inner shell reaps the run, so that its "Segmentation fault" notice goes
    # to the run's log rather than between this script's lines.
    bash -c 'timeout -k 5 "$1" "$2" --gtest_filter="$3"; rc=$?; exit $rc' _ \
      "$run_timeout" "${f%%$'\t'*}" "${f#*$'\t'}" >"$log" 2>&1
    rc=$?
    # A filter that matches nothing passes in GoogleTest; here it fails.
    if [[ $rc -eq 0 ]] && grep -q '^\[==========\] Running 0 tests' "$log"; then
      rc=3
      echo "  (no test matches '$(label "$f")')" >>"$log"
    fi
    done_runs[$f]=$((done_runs[$f] + 1))
    if [[ $rc -ne 0 ]]; then
      failures[$f]=$((failures[$f] + 1))
      why="exit $rc"
      ((rc == 3)) && why="no test matches the filter"
      if ((rc == 124 || rc == 137)); then
        why="timed out after ${run_timeout}s"
      elif ((rc > 128)); then
        why="signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
      fi
      detail=$(grep -m1 -E 'Assertion|Segmentation|\[  FAILED  \]|Failure$' "$log" || true)
      echo "  FAIL run $((round + 1)) of '$(label "$f")': $why ${detail:+-- $detail}"
      [[ -n "${first_failure[$f]}" ]] || first_failure[$f]="$why ${detail}"
      if [[ -n "$keep_logs" ]]; then
        mkdir -p "$keep_logs"
        cp "$log" "$keep_logs/$(label "$f" | tr -c 'A-Za-z0-9_.-' '_')_run$((round + 1)).log"
      fi
    fi
  done
  if (((round + 1) % 10 == 0)); then
    echo "  ... $((round + 1)) of ${runs} rounds, $((SECONDS - start))s"
  fi
done

total_runs=0
total_failures=0
echo "stress_run: results after $((SECONDS - start))s" \
  "$( ((cut_short)) && echo "(time limit reached before ${runs} runs each)")"
printf '  %-70s %6s %9s %14s\n' "filter" "runs" "failures" "per 100 runs"
for f in "${filters[@]}"; do
  n=${done_runs[$f]}
  k=${failures[$f]}
  total_runs=$((total_runs + n))
  total_failures=$((total_failures + k))
  rate="-"
  ((n > 0)) && rate=$(awk -v k="$k" -v n="$n" 'BEGIN { printf "%.1f", 100 * k / n }')
  printf '  %-70s %6d %9d %14s\n' "$(label "$f")" "$n" "$k" "$rate"
done
rate="-"
((total_runs > 0)) && rate=$(awk -v k="$total_failures" -v n="$total_runs" \
  'BEGIN { printf "%.1f", 100 * k / n }')
printf '  %-70s %6d %9d %14s\n' "all" "$total_runs" "$total_failures" "$rate"
((total_failures == 0 && total_runs > 0))
exit $?
