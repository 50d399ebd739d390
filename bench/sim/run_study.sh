#!/usr/bin/env bash
# Reproduces the simulator study of bench/results/sim.md (markdown on stdout).
# Usage: bench/sim/run_study.sh [path/to/ced-sim]
set -euo pipefail
SIM=${1:-build/bin/ced-sim}
# Runs last long enough for many request lifetimes; capped per run.
COMMON="--requests 300 --duration 120 --max-requests 8000 --bisection-steps 8 --seed 1"
RATIOS="1024:1024 4096:256 8192:128 32768:64"

run() {
  echo
  echo "\`ced-sim $*\`"
  echo
  "$SIM" "$@" | tail -n +2
}

echo "## Instance memory and one prefill step (H100, 4-GPU instances)"
run --info
echo
echo "## Instance memory (H100, 2-GPU prefill instances)"
run --info --prefill-gpus 2 | head -9

echo
echo "## Capacity of every split, six 4xH100 instances: CED (replay on prefill) vs decoder-only"
for r in $RATIOS; do
  in=${r%:*}; out=${r#*:}
  echo; echo "### $r"
  run --plan $COMMON --input-mean "$in" --output-mean "$out"
  run --plan $COMMON --input-mean "$in" --output-mean "$out" --ced-encoder-layers 80
done

echo
echo "## Replay on decode (encoder-only prefill instances)"
for r in $RATIOS; do
  in=${r%:*}; out=${r#*:}
  echo; echo "### $r"
  run --plan $COMMON --input-mean "$in" --output-mean "$out" --ced-replay-on decode
done

echo
echo "## 8192:128 with 2-GPU prefill instances (24 GPUs)"
for mode in "--ced-replay-on prefill" "--ced-replay-on decode" "--ced-encoder-layers 80"; do
  run --plan $COMMON --input-mean 8192 --output-mean 128 --prefill-gpus 2 --total-gpus 24 \
    --ttft-slo-ms 1528.7 $mode
done

echo
echo "## Naive router (reported queue only) vs in-flight accounting, 4096:256"
run --plan $COMMON --input-mean 4096 --output-mean 256 --naive-router
run --plan $COMMON --input-mean 4096 --output-mean 256 --naive-router --ced-encoder-layers 80

echo
echo "## The same with a slower load report (250 ms heartbeat), 4096:256"
run --plan $COMMON --input-mean 4096 --output-mean 256 --heartbeat-ms 250
run --plan $COMMON --input-mean 4096 --output-mean 256 --heartbeat-ms 250 --naive-router

echo
echo "## H200 fleet (six 4xH200 instances)"
run --info --gpu h200
for r in $RATIOS; do
  in=${r%:*}; out=${r#*:}
  echo; echo "### $r"
  run --plan $COMMON --gpu h200 --input-mean "$in" --output-mean "$out"
  run --plan $COMMON --gpu h200 --input-mean "$in" --output-mean "$out" --ced-encoder-layers 80
done
echo; echo "### 8192:128, replay on decode"
run --plan $COMMON --gpu h200 --input-mean 8192 --output-mean 128 --ced-replay-on decode

echo
echo "## H200: 8192:128 with 2-GPU prefill instances (24 GPUs)"
run --info --gpu h200 --prefill-gpus 2 | head -9
for mode in "--ced-replay-on prefill" "--ced-replay-on decode" "--ced-encoder-layers 80"; do
  run --plan $COMMON --gpu h200 --input-mean 8192 --output-mean 128 --prefill-gpus 2 \
    --total-gpus 24 --ttft-slo-ms 1528.7 $mode
done

echo
echo "## H200: naive router vs in-flight accounting, 4096:256"
run --plan $COMMON --gpu h200 --input-mean 4096 --output-mean 256 --naive-router
run --plan $COMMON --gpu h200 --input-mean 4096 --output-mean 256 --heartbeat-ms 250
run --plan $COMMON --gpu h200 --input-mean 4096 --output-mean 256 --heartbeat-ms 250 --naive-router
