#!/usr/bin/env bash
# The main job: builds ced, makes the embedded default model (`tiny`, seed 1)
# and answers a request with it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CED_BUILD_DIR:-build}
bash scripts/build.sh ced
MODEL_DIR=${CED_MODEL_DIR:-$BUILD_DIR/models/tiny}
if [[ ! -f "$MODEL_DIR/model.safetensors" ]]; then
  "$BUILD_DIR/bin/ced" model make --preset tiny --seed 1 --out "$MODEL_DIR"
fi
"$BUILD_DIR/bin/ced" model info "$MODEL_DIR"
echo "--- generate (CED prefill + replay + decode) ---"
"$BUILD_DIR/bin/ced" generate --model "$MODEL_DIR" --prompt "${CED_PROMPT:-Hello from ced-serve}" \
  --max-tokens "${CED_MAX_TOKENS:-32}"
