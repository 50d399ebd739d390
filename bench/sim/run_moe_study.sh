#!/usr/bin/env bash
# The pool-split study of the seed on the DeepSeek-V4.1-Flash shape (MoE,
# DESIGN.md §1.7; the `deepseek-v4.1-flash` preset): the "MoE" section of
# bench/results/sim.md, markdown on stdout.
# Usage: bench/sim/run_moe_study.sh [path/to/ced-sim]
#
# Instances of 8x H200 with fp8 weights (--bytes-per-param 1): the full model
# is 552 GB, 49% of 8 x 141 GB, leaving 463 GB of K/V room; in bf16 (1.10 TB)
# it does not fit in 90% of one 8-GPU node (the --info tables show it).
set -euo pipefail
SIM=${1:-build/bin/ced-sim}
COMMON="--requests 300 --duration 120 --max-requests 8000 --bisection-steps 8 --seed 1"
MODEL="--preset deepseek-v4.1-flash --gpu h200"
FP8="--bytes-per-param 1"
RATIOS="1024:1024 4096:256 8192:128 32768:64"

run() {
  echo
  echo "\`ced-sim $*\`"
  echo
  local out
  if out=$("$SIM" "$@" 2>&1); then
    echo "$out" | tail -n +2
  else
    echo "$out"  # a configuration that cannot run (weights do not fit): say so
  fi
}

echo "### Instance memory and one prefill step (8x H200 instances, fp8 weights)"
run --info $MODEL $FP8 --prefill-gpus 8 --decode-gpus 8
echo
echo "### Instance memory with 4x H200 prefill instances"
run --info $MODEL $FP8 --prefill-gpus 4 --decode-gpus 8 | head -10
echo
echo "### Instance memory with bf16 weights (8x and 16x H200)"
run --info $MODEL --bytes-per-param 2 --prefill-gpus 8 --decode-gpus 8 | head -10
run --info $MODEL --bytes-per-param 2 --prefill-gpus 16 --decode-gpus 16 | head -10

echo
echo "### Capacity of every split, six 8x H200 instances (48 GPUs)"
for r in $RATIOS; do
  in=${r%:*}; out=${r#*:}
  echo; echo "#### $r"
  for mode in "--ced-replay-on prefill" "--ced-replay-on decode" "--ced-encoder-layers 40"; do
    run --plan $COMMON $MODEL $FP8 --prefill-gpus 8 --decode-gpus 8 --input-mean "$in" \
      --output-mean "$out" $mode
  done
done

echo
echo "### 4x H200 prefill instances, 8x H200 decode instances (48 GPUs), 8192:128"
for mode in "--ced-replay-on prefill" "--ced-replay-on decode" "--ced-encoder-layers 40"; do
  run --plan $COMMON $MODEL $FP8 --prefill-gpus 4 --decode-gpus 8 --total-gpus 48 \
    --input-mean 8192 --output-mean 128 --ttft-slo-ms 203.6 $mode
done
