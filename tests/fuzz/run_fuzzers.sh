#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang++ under ASan + UBSan
# and runs each for a fixed number of executions from the seed corpus in
# tests/fuzz/corpus/<fuzzer>/. Fails on any crash, sanitizer report, leak,
# timeout or failed property check; the crashing input is left in
# <build-dir>/artifacts/.
#
# Usage: run_fuzzers.sh [--build-only | --run-only] <build-dir> [fuzzer...]
#   fuzzers: request kv_wire safetensors config tokenizer (default: all)
# Environment:
#   FUZZ_RUNS    executions per fuzzer (default 1000000)
#   FUZZ_SEED    libFuzzer's random seed (default 1: CI runs are repeatable)
#   FUZZ_JOBS    parallel compile jobs (default 2)
#   CXX_FUZZ     the clang++ to use (default clang++)
# Exits 77 (skipped) when clang++ with libFuzzer, protoc or a needed
# pkg-config module is missing (--build-only: exits 0, building nothing);
# under CI=true (scripts/install_deps.sh installed them) that fails instead.
# A run passes only when libFuzzer reports every execution it was asked for.
#
# Reproduce a crash: <build-dir>/<fuzzer>_fuzzer <build-dir>/artifacts/<file>
set -euo pipefail

mode=all
case "${1:-}" in
  --build-only) mode=build; shift ;;
  --run-only) mode=run; shift ;;
esac
if (($# < 1)); then
  echo "usage: $0 [--build-only | --run-only] <build-dir> [fuzzer...]" >&2
  exit 2
fi
build_dir=$(mkdir -p "$1" && cd "$1" && pwd)
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
all_fuzzers=(request kv_wire safetensors config tokenizer)
fuzzers=("$@")
if ((${#fuzzers[@]} == 0)); then
  fuzzers=("${all_fuzzers[@]}")
fi
runs=${FUZZ_RUNS:-1000000}
seed=${FUZZ_SEED:-1}
jobs=${FUZZ_JOBS:-2}
cxx=${CXX_FUZZ:-clang++}

# --build-only exits 0 when skipping, so that CTest's fuzz_build (a fixture
# setup) passes and each fuzz_<name> test then reports itself skipped. Under
# CI=true a missing toolchain fails (exit 1) in every mode.
skip() {
  if [[ ${CI:-} == true ]]; then
    echo "[fuzz] FAIL: $* (scripts/install_deps.sh installs it; CI=true: a missing tool fails)" >&2
    exit 1
  fi
  echo "[fuzz] SKIP: $*" >&2
  if [[ $mode == build ]]; then exit 0; fi
  exit 77
}

# The K/V row codecs: the dispatcher, the CPU check and the codec source once
# per kernel variant (SOURCE@N compiles SOURCE with CED_KERNEL_VARIANT=N).
kv_codec_sources="kernels/cpu/kv_codec.cc kernels/cpu/isa.cc kernels/cpu/kv_codec_rows.cc@0
  kernels/cpu/kv_codec_rows.cc@1 kernels/cpu/kv_codec_rows.cc@2"

# The tokenizer library (byte tokenizer and tokenizer.json BPE).
# Every source of the library (a file added there is fuzzed without an edit here).
tokenizer_sources=$(cd "$repo" && ls engine/tokenizer/*.cc | tr '\n' ' ')
tokenizer_modules="oniguruma libutf8proc absl_hash absl_raw_hash_set"

# Per-fuzzer settings: project sources, pkg-config modules, -max_len.
sources_of() {
  case "$1" in
    request)
      echo services/gateway/request_parsing.cc services/gateway/request_validation.cc \
        $tokenizer_sources engine/sampling/sampler.cc \
        engine/common/status.cc gen:ced/v1/gateway.pb.cc gen:ced/internal/common.pb.cc ;;
    kv_wire)
      echo services/kv_transport/wire.cc services/kv_transport/checksum.cc \
        engine/kv/sequence_state.cc engine/model/config.cc engine/common/status.cc \
        services/kv_transport/checksum_x86.cc $kv_codec_sources ;;
    safetensors)
      echo engine/model/safetensors.cc engine/common/status.cc $kv_codec_sources ;;
    config)
      echo engine/model/config.cc engine/common/status.cc $kv_codec_sources ;;
    tokenizer)
      echo $tokenizer_sources engine/common/status.cc ;;
    *) echo "[fuzz] unknown fuzzer '$1' (known: ${all_fuzzers[*]})" >&2; exit 2 ;;
  esac
}
absl_modules="absl_status absl_statusor absl_strings absl_str_format absl_span"
modules_of() {
  case "$1" in
    request) echo "$absl_modules $tokenizer_modules protobuf grpc++" ;;
    tokenizer) echo "$absl_modules $tokenizer_modules" ;;
    *) echo "$absl_modules" ;;
  esac
}
max_len_of() {
  case "$1" in
    request) echo 512 ;;
    kv_wire) echo 1024 ;;
    safetensors) echo 1024 ;;
    config) echo 1024 ;;
    tokenizer) echo 256 ;;
  esac
}

check_toolchain() {
  command -v "$cxx" >/dev/null || skip "$cxx not found (install clang and libclang-rt-dev)"
  command -v pkg-config >/dev/null || skip "pkg-config not found"
  local probe="$build_dir/probe"
  mkdir -p "$probe"
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' \
    >"$probe/probe.cc"
  "$cxx" -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" \
    2>"$probe/log" || skip "$cxx cannot link -fsanitize=fuzzer,address,undefined: $(head -c 300 "$probe/log")"
  local f m
  for f in "${fuzzers[@]}"; do
    sources_of "$f" >/dev/null
    for m in $(modules_of "$f"); do
      pkg-config --exists "$m" || skip "pkg-config module $m not found"
    done
  done
  if [[ " ${fuzzers[*]} " == *" request "* ]]; then
    command -v protoc >/dev/null || skip "protoc not found"
  fi
}

# Writes build.ninja (objects shared between fuzzers, header dependencies
# tracked) and runs ninja.
build() {
  check_toolchain
  command -v ninja >/dev/null || skip "ninja not found"
  local launcher=""
  if command -v ccache >/dev/null; then launcher="ccache "; fi
  local gen="$build_dir/gen"
  local flags="-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined"
  flags+=" -fno-sanitize-recover=all -I$repo -I$gen"
  flags+=" $(pkg-config --cflags $absl_modules protobuf | tr '\n' ' ')"
  local n="$build_dir/build.ninja.tmp"
  {
    echo "# Generated by tests/fuzz/run_fuzzers.sh; do not edit."
    echo "cxx = $launcher$cxx"
    echo "flags = $flags"
    echo "rule cxx"
    echo "  command = \$cxx \$flags -MMD -MF \$out.d -c \$in -o \$out"
    echo "  depfile = \$out.d"
    echo "  deps = gcc"
    echo "  description = CXX \$out"
    echo "rule link"
    echo "  command = $cxx -fsanitize=fuzzer,address,undefined \$in -o \$out \$libs"
    echo "  description = LINK \$out"
    echo "rule protoc"
    echo "  command = protoc --proto_path=$repo/proto --cpp_out=$gen \$in"
    echo "  description = PROTOC \$in"
    echo "build $gen/ced/v1/gateway.pb.cc $gen/ced/v1/gateway.pb.h: protoc $repo/proto/ced/v1/gateway.proto"
    echo "build $gen/ced/internal/common.pb.cc $gen/ced/internal/common.pb.h: protoc $repo/proto/ced/internal/common.proto"
    local f s src obj objs gen_dep seen=" "
    for f in "${fuzzers[@]}"; do
      # Only the request fuzzer includes generated protobuf headers.
      gen_dep=""
      if [[ $f == request ]]; then
        gen_dep=" || $gen/ced/v1/gateway.pb.h $gen/ced/internal/common.pb.h"
      fi
      objs="obj/fuzz/${f}_fuzzer.o"
      echo "build obj/fuzz/${f}_fuzzer.o: cxx $here/${f}_fuzzer.cc$gen_dep"
      for s in $(sources_of "$f"); do
        local defs=""
        if [[ $s == gen:* ]]; then src="$gen/${s#gen:}"; obj="obj/gen/${s#gen:}.o"
        elif [[ $s == *@* ]]; then
          src="$repo/${s%@*}"; obj="obj/src/${s%@*}.v${s#*@}.o"; defs=" -DCED_KERNEL_VARIANT=${s#*@}"
        else src="$repo/$s"; obj="obj/src/$s.o"; fi
        objs+=" $obj"
        if [[ $seen != *" $obj "* ]]; then
          seen+="$obj "
          echo "build $obj: cxx $src$gen_dep"
          if [[ -n $defs ]]; then echo "  flags = $flags$defs"; fi
        fi
      done
      echo "build ${f}_fuzzer: link $objs"
      echo "  libs = $(pkg-config --libs $(modules_of "$f") | tr '\n' ' ')"
    done
  } >"$n"
  mv "$n" "$build_dir/build.ninja"
  local targets=()
  for f in "${fuzzers[@]}"; do targets+=("${f}_fuzzer"); done
  ninja -C "$build_dir" -j "$jobs" "${targets[@]}"
  for f in "${fuzzers[@]}"; do
    [[ -x "$build_dir/${f}_fuzzer" ]] || { echo "[fuzz] FAIL: ${f}_fuzzer was not built" >&2; exit 1; }
  done
  echo "[fuzz] built ${#fuzzers[@]} fuzzers: ${targets[*]}"
}

run_one() {
  local f=$1 bin="$build_dir/${1}_fuzzer" corpus="$build_dir/corpus/$1"
  if [[ ! -x $bin ]]; then
    local rc=0
    (check_toolchain) || rc=$?
    if ((rc == 77)); then exit 77; fi  # no toolchain: skipped, not failed
    if ((rc != 0)); then exit "$rc"; fi  # CI=true: no toolchain fails
    echo "[fuzz] $bin not built (run with --build-only first)" >&2
    return 1
  fi
  rm -rf "$corpus"
  mkdir -p "$corpus" "$build_dir/artifacts"
  local log="$build_dir/$f.log" start end
  start=$(date +%s)
  # New inputs go to the scratch corpus (first directory); the repo seeds stay
  # untouched. ASan/UBSan reports abort, which libFuzzer records as a crash.
  if ! ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$bin" -runs="$runs" -seed="$seed" -max_len="$(max_len_of "$f")" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build_dir/artifacts/$f-" \
    "$corpus" "$here/corpus/$f" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "[fuzz] FAIL $f: see $log and $build_dir/artifacts/" >&2
    return 1
  fi
  end=$(date +%s)
  local done_line
  done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -n 1)
  echo "[fuzz] ok $f: $done_line (wall $((end - start)) s); $(grep -E 'stat::(number_of_executed_units|peak_rss_mb)' "$log" | tr -s ' \n' ' ')"
  grep -qE "^Done $runs runs" "$log" || {
    echo "[fuzz] FAIL $f: did not complete $runs runs" >&2
    return 1
  }
  # libFuzzer's own count of inputs executed: a fuzzer that ran nothing fails.
  local executed
  executed=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
  if [[ -z $executed ]] || ((executed < runs)); then
    echo "[fuzz] FAIL $f: executed ${executed:-no} units, want >= $runs" >&2
    return 1
  fi
}

if [[ $mode != run ]]; then
  build
fi
if [[ $mode != build ]]; then
  status=0
  for f in "${fuzzers[@]}"; do
    run_one "$f" || status=1
  done
  exit $status
fi
