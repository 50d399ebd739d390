#!/usr/bin/env bash
# One prepared GPU run: kernel tests, engine parity test and GPU benchmarks,
# results to bench/results/gpu.md. Meant for a fresh GPU machine that has
# nvcc, CMake and ninja but maybe no apt packages and no network:
#   - the benchmarks build from bench/gpu on their own (CUDA toolkit only);
#   - the tests need the project's dependencies (absl, OpenBLAS, OpenMP,
#     GoogleTest): they are built here when CMake finds them, or taken from a
#     build directory carried over from a machine that has them
#     (CED_BUILD_DIR=path, configured with -DCED_CUDA=ON); otherwise the
#     report says they were not run.
# Usage: bash bench/gpu/run.sh            (from the repository root)
# Env:   CED_BUILD_DIR, CED_PEAK_TFLOPS (989), CED_HBM_GBS (4800), JOBS.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=bench/results/gpu.md
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

# 2. Tests: a carried build dir, else a minimal configure of the project.
tests_dir=${CED_BUILD_DIR:-}
if [[ -z "$tests_dir" ]]; then
  tests_dir=build-gpu-tests
  note "configuring the project for the CUDA tests"
  if cmake -G Ninja -S . -B "$tests_dir" -DCED_CUDA=ON -DCED_BUILD_SERVICES=OFF \
       -DCED_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >"$log/tests_cfg.txt" 2>&1; then
    note "building the CUDA tests"
    ninja -C "$tests_dir" -j"$jobs" cuda_kernels_test cuda_attention_test cuda_sampling_test \
      cuda_engine_test >"$log/tests_build.txt" 2>&1 || true
  fi
fi
run_test() {  # name -> appends a summary line
  local bin="$tests_dir/tests/cuda/$1"
  if [[ ! -x "$bin" ]]; then
    echo "| $1 | not built (see the notes) | |"
    return
  fi
  timeout 240 "$bin" >"$log/$1.txt" 2>&1
  local rc=$?
  count() { grep -E "^\[ +$1 +\] [0-9]+ test" "$log/$2.txt" | head -1 | grep -oE '\] [0-9]+' | grep -oE '[0-9]+'; }
  local passed skipped failed
  passed=$(count PASSED "$1"); skipped=$(count SKIPPED "$1"); failed=$(count FAILED "$1")
  echo "| $1 | exit $rc: ${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed | $(grep -E '^\[  FAILED  \] [A-Za-z/]+\.' "$log/$1.txt" | sort -u | head -3 | sed 's/\[  FAILED  \] //' | tr '\n' ' ') |"
}
note "running the tests"
test_rows=""
for t in cuda_kernels_test cuda_attention_test cuda_sampling_test cuda_engine_test; do
  test_rows+="$(run_test "$t")"$'\n'
done

# 3. Benchmarks.
bench_out="(the bench did not build: see the build log excerpt below)"
if [[ $bench_built == 1 ]]; then
  note "running the GPU bench"
  timeout 200 "$bench_dir/ced_gpu_bench" --peak_tflops="${CED_PEAK_TFLOPS:-989}" \
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
