#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CED_BUILD_DIR:-build}
bash scripts/build.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --timeout 900
