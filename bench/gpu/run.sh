#!/usr/bin/env bash
# One prepared GPU run: kernel tests, engine parity test, the KV transfer
# tests (device CRC32C; the "nccl" transport with two processes, which needs
# two GPUs), the disaggregated-vs-colocated cluster parity test on the GPU,
# and the GPU benchmarks (kernels + KV transfer paths), results to
# bench/results/gpu.md. Meant for a fresh GPU machine that has nvcc, CMake and
# ninja but maybe no apt packages and no network:
#   - the benchmarks build from bench/gpu on their own (CUDA toolkit only);
#   - the tests need the project's dependencies (absl, OpenBLAS, OpenMP,
#     GoogleTest; gRPC, protobuf and UCX for the transport and cluster tests):
#     they are built here when CMake finds them, or taken from a build
#     directory carried over from a machine that has them (CED_BUILD_DIR=path,
#     configured with -DCED_CUDA=ON, including lib/ with the CUDA plugins);
#     otherwise the report says they were not run.
# Usage: bash bench/gpu/run.sh            (from the repository root)
# Env:   CED_BUILD_DIR, CED_PEAK_TFLOPS (989), CED_HBM_GBS (4800), JOBS,
#        CED_GPU_RESULTS (report path, default bench/results/gpu.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${CED_GPU_RESULTS:-bench/results/gpu.md}  # where the report goes
jobs=${JOBS:-$(nproc)}
log=$(mktemp -d)
start=$(date +%s)
export PATH="$PATH:/usr/local/cuda/bin"

note() { echo "[$(($(date +%s) - start))s] $*" >&2; }

# 1. Benchmarks (standalone build).
note "building the GPU bench"
bench_dir=build-gpu-bench
if cmake -G Ninja -S bench/gpu -B "$bench_dir" -DCMAKE_CUDA_ARCHITECTURES=90 >"$log/bench_cfg.txt" 2>&1 &&
   ninja -C "$bench_dir" -j"$jobs" >"$log/bench_build.txt" 2>&1; then
  bench_built=1
else
  bench_built=0
fi

# 2. Tests: a carried build dir, else a configure of the project here (with
#    the services when their apt packages exist, else without them).
cuda_tests=(cuda_kernels_test cuda_attention_test cuda_sampling_test cuda_engine_test
            cuda_crc32c_test cuda_nccl_transport_test cuda_cluster_test)
tests_dir=${CED_BUILD_DIR:-}
if [[ -z "$tests_dir" ]]; then
  tests_dir=build-gpu-tests
  note "configuring the project for the CUDA tests"
  configured=0
  for services in ON OFF; do
    rm -f "$tests_dir/CMakeCache.txt"
    if cmake -G Ninja -S . -B "$tests_dir" -DCED_CUDA=ON -DCED_BUILD_SERVICES=$services \
         -DCED_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >"$log/tests_cfg.txt" 2>&1; then
      configured=1
      note "configured (services $services)"
      break
    fi
  done
  if [[ $configured == 1 ]]; then
    note "building the CUDA tests"
    # Only the targets this configuration has (no services: no transport or cluster test).
    mapfile -t have < <(ninja -C "$tests_dir" -t targets all 2>/dev/null | sed 's/:.*//' |
                        grep -xE "$(IFS='|'; echo "${cuda_tests[*]}")")
    ninja -C "$tests_dir" -j"$jobs" "${have[@]}" >"$log/tests_build.txt" 2>&1 || true
  fi
fi
# The tests find `ced`, the plugins and the sources through these (the paths
# compiled into a carried build dir may be another machine's).
if [[ -d "$tests_dir" ]]; then
  CED_BINARY_DIR=$(cd "$tests_dir" && pwd)
  export CED_BINARY_DIR CED_SOURCE_DIR="$root"
fi
run_test() {  # name -> appends a summary line
  local bin="$tests_dir/tests/cuda/$1"
  if [[ ! -x "$bin" ]]; then
    echo "| $1 | not built (see the notes) | |"
    return
  fi
  timeout "${2:-120}" "$bin" >"$log/$1.txt" 2>&1
  local rc=$?
  count() { grep -E "^\[ +$1 +\] [0-9]+ test" "$log/$2.txt" | head -1 | grep -oE '\] [0-9]+' | grep -oE '[0-9]+'; }
  local passed skipped failed
  passed=$(count PASSED "$1"); skipped=$(count SKIPPED "$1"); failed=$(count FAILED "$1")
  echo "| $1 | exit $rc: ${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed | $(grep -E '^\[  FAILED  \] [A-Za-z/]+\.' "$log/$1.txt" | sort -u | head -3 | sed 's/\[  FAILED  \] //' | tr '\n' ' ') |"
}
note "running the tests"
test_rows=""
for t in "${cuda_tests[@]}"; do
  limit=120
  [[ $t == cuda_cluster_test ]] && limit=180  # starts a 4-process cluster on the GPU
  if (( $(date +%s) - start > 270 )); then  # keep the whole run under 6 minutes
    test_rows+="| $t | not run: the script's time budget was spent | |"$'\n'
    continue
  fi
  test_rows+="$(run_test "$t" "$limit")"$'\n'
done

# 3. Benchmarks.
bench_out="(the bench did not build: see the build log excerpt below)"
if [[ $bench_built == 1 ]]; then
  note "running the GPU bench"
  timeout 150 "$bench_dir/ced_gpu_bench" --peak_tflops="${CED_PEAK_TFLOPS:-989}" \
    --hbm_gbs="${CED_HBM_GBS:-4800}" >"$log/bench.txt" 2>&1
  bench_out=$(cat "$log/bench.txt")
fi

{
  echo "# GPU results"
  echo
  echo "Produced by \`bash bench/gpu/run.sh\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "## Tests (tests/cuda, build dir \`$tests_dir\`)"
  echo
  echo "| binary | result | first failures |"
  echo "|---|---|---|"
  printf "%s" "$test_rows"
  echo
  echo "$bench_out"
  echo
  echo "## Notes"
  echo
  echo "- Total wall time of the script: $(($(date +%s) - start)) s."
  if [[ $bench_built != 1 ]]; then
    echo "- Bench build failed:"; echo '```'; tail -20 "$log/bench_build.txt" "$log/bench_cfg.txt" 2>/dev/null; echo '```'
  fi
  if [[ -f "$log/tests_cfg.txt" ]] && ! grep -q "Build files have been written" "$log/tests_cfg.txt"; then
    echo "- The project did not configure here (missing apt dependencies?); carry a build dir with CED_BUILD_DIR:"
    echo '```'; grep -E "Could NOT|not found|Error" "$log/tests_cfg.txt" | head -8; echo '```'
  fi
} >"$out"
note "wrote $out"
cat "$out"
