#!/usr/bin/env bash
# The quality study, end to end (bench/results/quality.md): corpus, tokenizer, a CED and
# its decoder-only twin per seed, the measurements, plots, the engine's prefill bench on
# the trained shapes, and (with --ship) the default model in models/ced-pydocs.
#
#   bash bench/quality/run.sh [--work DIR] [--seeds "1 2"] [--steps 1000]
#                             [--measure-windows 64] [--plots bench/results/plots] [--ship]
#
# Needs Debian's python3-torch, python3-numpy, python3-regex, python3-matplotlib and
# python3.11-doc (installed here when missing) and a built `ced` (scripts/build.sh).
# Time on 2 cores with AVX-512 (bf16): about 30 min per seed (the two twins train side
# by side, one thread each), about 10 min of measurements per seed, 1 min of engine
# bench. Without AVX-512 bf16 the training steps run several times slower.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=build/quality
SEEDS="1 2"
STEPS=1000
SHIP=0
WINDOWS=64
PLOTS=bench/results/plots
while [[ $# -gt 0 ]]; do
  case "$1" in
    --work) WORK=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --measure-windows) WINDOWS=$2; shift 2 ;;
    --plots) PLOTS=$2; shift 2 ;;
    --ship) SHIP=1; shift ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
if ! $PY -c 'import torch, numpy, regex, matplotlib' 2>/dev/null ||
   [[ ! -d /usr/share/doc/python3.11/html/_sources ]]; then
  apt-get update && apt-get install -y python3-torch python3-numpy python3-regex \
    python3-matplotlib python3.11-doc
fi
CED=${CED_BINARY_DIR:-build}/bin/ced
[[ -x "$CED" ]] || bash scripts/build.sh ced ced_engine_bench
mkdir -p "$WORK"
Q=bench/quality
T0=$(date +%s)
echo "--- corpus and tokenizer ---"
$PY $Q/corpus.py --out "$WORK/corpus"
$PY $Q/bpe.py --corpus "$WORK/corpus" --vocab-size 4096 --out "$WORK/tokenizer"
echo "--- the engine's tokenizer against the training encoder (validation split) ---"
$PY $Q/check_tokenizer.py --ced "$CED" --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer" \
  | tee "$WORK/tokenizer_check.txt"
for seed in $SEEDS; do
  echo "--- seed $seed: CED (E=4) and decoder-only (E=8), side by side ---"
  $PY $Q/train.py --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer" --out "$WORK/ced_s$seed" \
    --encoder-layers 4 --seed "$seed" --steps "$STEPS" --threads 1 > "$WORK/ced_s$seed.log" 2>&1 &
  P1=$!
  $PY $Q/train.py --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer" --out "$WORK/dec_s$seed" \
    --encoder-layers 8 --seed "$seed" --steps "$STEPS" --threads 1 > "$WORK/dec_s$seed.log" 2>&1 &
  P2=$!
  tail -f "$WORK/ced_s$seed.log" --pid=$P1 &
  wait $P1 $P2
  tail -n 1 "$WORK/dec_s$seed.log"
  for m in ced dec; do cp "$WORK/tokenizer"/tokenizer*.json "$WORK/${m}_s$seed/model/"; done
  echo "--- seed $seed: measurements ---"
  $PY $Q/measure.py --corpus "$WORK/corpus" --ced "$WORK/ced_s$seed/model" \
    --dec "$WORK/dec_s$seed/model" --out "$WORK/measure_s$seed.json" --windows "$WINDOWS"
done
FIRST=$(echo $SEEDS | awk '{print $1}')
echo "--- engine prefill on the trained shapes (CED vs decoder-only twin) ---"
OMP_WAIT_POLICY=passive ${CED_BINARY_DIR:-build}/bin/ced_engine_bench --sections=prefill \
  --ced_model "$WORK/ced_s$FIRST/model" --dec_model "$WORK/dec_s$FIRST/model" \
  --prompt_tokens 255 --chunk_tokens 256 --prefill_reps 15 --variants all --peers off \
  --markdown "$WORK/prefill.md" --json "$WORK/prefill.json"
$PY $Q/report.py --work "$WORK" --seeds "$SEEDS" --plots "$PLOTS" \
  > "$WORK/report.md"
if [[ $SHIP == 1 ]]; then
  echo "--- shipping seed $FIRST's CED as models/ced-pydocs ---"
  mkdir -p models/ced-pydocs
  cp "$WORK/ced_s$FIRST/model/"{config.json,model.safetensors,tokenizer.json,tokenizer_config.json} \
    models/ced-pydocs/
  $PY $Q/golden.py --model models/ced-pydocs
fi
echo "done in $(( $(date +%s) - T0 )) s; tables: $WORK/report.md"
