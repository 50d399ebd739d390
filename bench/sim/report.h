// Markdown tables of simulator, planner and cost-model results.
#pragma once

#include <string>
#include <vector>

#include "bench/sim/hardware.h"
#include "bench/sim/planner.h"
#include "bench/sim/simulator.h"
#include "engine/model/config.h"

namespace ced::sim {

// One run: attainment, latencies (ms), throughput.
std::string SummaryTable(const SimSummary& summary);

// Every split's max rate; the best split marked.
std::string PlanTable(const PlanResult& plan);

// What an instance must hold: weights and KV room (GB, tokens) for a
// decoder-only prefill instance, CED prefill with replay on prefill, CED
// prefill with replay on decode, and a decode instance. `model` is the CED
// shape; its decoder-only twin is derived.
std::string InstanceMemoryTable(const ModelConfig& model, const GpuSpec& gpu, int prefill_gpus,
                                int decode_gpus);

// One prefill step for one prompt per length (ms): decoder-only, CED with
// the replay, encoder-only (replay on decode), and decoder-only / CED.
std::string PrefillStepTable(const ModelConfig& model, const GpuSpec& gpu, int gpus,
                             const std::vector<int64_t>& lengths);

}  // namespace ced::sim
