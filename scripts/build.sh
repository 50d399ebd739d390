#!/usr/bin/env bash
# Configures and builds ced-serve (Release, Ninja, ccache) into ${CED_BUILD_DIR:-build}.
# Extra CMake arguments: CED_CMAKE_ARGS="-DCED_CUDA=OFF ...".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
BUILD_DIR=${CED_BUILD_DIR:-build}
# Let ccache share results between clones in different folders.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
# shellcheck disable=SC2086
cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CED_CMAKE_ARGS:-} >/dev/null
ninja -C "$BUILD_DIR" "$@"
