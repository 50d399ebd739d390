#!/usr/bin/env bash
# Runs the services benchmarks (ced_services_bench) from the repository root and
# writes bench/results/services.md and bench/results/services.json.
#
#   bench/services/run.sh                 # full run, ~10 min on 2 busy cores
#   bench/services/run.sh --quick         # ~3 min
#   bench/services/run.sh --build-dir B --no-build --sections=transport
#
# Flags other than --build-dir/--no-build go to ced_services_bench (--help lists them).
# Needs ucx_perftest (Debian: ucx-utils, see scripts/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

build_dir=build
build=1
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --build-dir=*) build_dir="${1#*=}"; shift ;;
    --no-build) build=0; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

if [[ "$build" == 1 ]]; then
  [[ -f "$build_dir/build.ninja" ]] || cmake -G Ninja -S . -B "$build_dir" >/dev/null
  ninja -C "$build_dir" -j2 ced ced_services_bench
fi
if ! command -v ucx_perftest >/dev/null; then
  echo "run.sh: ucx_perftest not found (install ucx-utils)" >&2
  exit 1
fi
# Spinning OpenMP threads cost 3-10x on a shared machine (bench/README.md); the
# clusters the bench starts inherit this.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec "$build_dir/bin/ced_services_bench" "${args[@]}"
