// Private pieces shared by the engine's translation units.
#pragma once

#include <vector>

#include "engine/backend/backend.h"
#include "engine/runtime/engine.h"

namespace ced {

// Backend scratch memory (contents unspecified until written) freed on
// scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend* backend, size_t count_floats)
      : backend_(backend),
        data_(static_cast<float*>(backend->AllocScratch(count_floats * sizeof(float)))) {}
  ~DeviceBuffer() { backend_->Free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return data_; }
  bool ok() const { return data_ != nullptr; }

 private:
  Backend* backend_;
  float* data_;
};

struct Engine::Sequence {
  SeqId id = 0;
  int capacity = 0;
  std::vector<int> blocks;
  int local_slot = -1;
  int num_tokens = 0;
  int replay_start = 0;
  bool prefilled = false;
  bool replay_done = false;
  // Prefix cache (§1.6): P cached tokens shared by reference; the encoder of
  // a resumed prefill runs from encoder_lo (its local window clipped there);
  // global K/V is written only from write_from (cached values stand).
  int cached_tokens = 0;
  int encoder_lo = 0;
  int write_from = 0;
  std::vector<int32_t> tokens;   // token ids of positions [0, tokens.size())
  std::vector<BlockHash> hashes; // hash chain of the full blocks published so far
  // Blocks [0, shared_from) were offered to the shared store (queued, or
  // skipped as already there, or left to the peer that computed them): each
  // is written at most once.
  size_t shared_from = 0;
  std::vector<float> h_e;  // host f32 [num_tokens - replay_start, d] while a replay is pending
  // The encoder's local rings hold a computation of the positions before
  // num_tokens (from encoder_lo) that a prompt may continue: set by Prefill
  // and by ImportTail (the prefill engine's windows), kept by decode steps;
  // false for a sequence only created, or reserved for imported K/V.
  bool own_rings = false;
  // Taken over from a held sequence (Engine::HoldSequence): Prefill may run
  // the encoder on from cached_tokens with these rings instead of a rebuild.
  bool continues_rings = false;
  // Engine::WarmUp's: its blocks are never published, cached or stored.
  bool throwaway = false;
};

struct Engine::Batch {
  struct Segment {
    Sequence* seq = nullptr;
    int begin = 0;  // first position
    int n = 0;      // positions
    int row0 = 0;   // first row in the batch
  };
  std::vector<Segment> segments;
  int rows = 0;
  std::vector<int32_t> positions;  // per row

  void Add(Sequence* seq, int begin, int n) {
    segments.push_back({seq, begin, n, rows});
    for (int i = 0; i < n; ++i) positions.push_back(begin + i);
    rows += n;
  }
};

struct Engine::DeviceWeights {
  struct Ffn {
    const float *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
  };
  struct Layer {
    const float *attn_norm = nullptr, *wq = nullptr, *local_k = nullptr, *local_v = nullptr,
                *global_k = nullptr, *global_v = nullptr, *wo = nullptr, *ffn_norm = nullptr,
                *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
    // MoE layers (§1.7).
    const float* router = nullptr;
    std::vector<Ffn> experts;
    Ffn shared;
  };
  const float *embed = nullptr, *encoder_norm = nullptr, *final_norm = nullptr, *lm_head = nullptr;
  std::vector<Layer> layers;
};

}  // namespace ced
