// Chunked CED prefill, the replay, and batched decode (DESIGN.md §1.4).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_internal.h"

namespace ced {
namespace {

bool HoldsDecoder(const ModelWeights& w) {
  return w.lm_head.loaded() && w.layers.back().wq.loaded();
}

}  // namespace

absl::StatusOr<PrefillResult> Engine::Prefill(SeqId id, absl::Span<const int32_t> tokens,
                                              const PrefillOptions& options) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  const ModelConfig& c = config_;
  const int n = static_cast<int>(tokens.size());
  if (seq->prefilled) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " is already prefilled"));
  }
  if (n == 0) return absl::InvalidArgumentError("prompt is empty");
  if (n > seq->capacity) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", n, " tokens exceeds the ",
                                                   seq->capacity, " reserved"));
  }
  RETURN_IF_ERROR(CheckTokens(tokens));
  if (options.chunk_tokens <= 0) {
    return absl::InvalidArgumentError("chunk_tokens must be positive");
  }
  if (options.replay_window != 0 && options.replay_window < std::max(c.sliding_window, 1)) {
    return absl::InvalidArgumentError(absl::StrCat("replay_window ", options.replay_window,
                                                   " is below max(W, 1) = ",
                                                   std::max(c.sliding_window, 1)));
  }
  if (!c.IsDecoderOnly() && !options.defer_replay && !HoldsDecoder(*weights_)) {
    return absl::FailedPreconditionError(
        "this instance holds encoder-only weights: the replay must be deferred to decode");
  }
  const int p = seq->cached_tokens;
  if (p > 0 &&
      (p >= n || !std::equal(seq->tokens.begin(), seq->tokens.begin() + p, tokens.begin()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, " was created for another prompt (its ", p, " cached tokens differ)"));
  }
  const int s = ReplayStart(n, options.replay, options.replay_window);
  // A resumed prefill (P cached tokens) runs the encoder from a, its local
  // windows clipped there, and writes global K/V only from P (§1.6); one
  // that took over a held sequence continues its rings from P instead (the
  // encoder as a fresh prefill of the whole prompt computes it) when the
  // replay needs no h_E row before P.
  const bool ced = !c.IsDecoderOnly();
  const bool continues = seq->continues_rings && p > 0 && (!ced || s >= p);
  seq->continues_rings = false;
  const int a = continues ? p : ResumeStart(n, p, options.replay, options.replay_window);
  seq->replay_start = s;
  if (!continues) seq->encoder_lo = a;
  seq->write_from = p;
  seq->tokens.assign(tokens.begin(), tokens.end());
  seq->h_e.clear();
  const int d = c.hidden_size;

  PrefillResult result;
  result.num_tokens = n;
  result.replay_start = s;
  result.cached_tokens = p;
  result.computed_from = a;
  if (p > 0 && options.on_chunk) options.on_chunk(0, p);  // cached: final already
  for (int c0 = a; c0 < n; c0 += options.chunk_tokens) {
    if (options.cancelled && options.cancelled()) {
      return absl::CancelledError(absl::StrCat("prefill of sequence ", id, " cancelled"));
    }
    const int c1 = std::min(n, c0 + options.chunk_tokens);
    Batch batch;
    batch.Add(seq, c0, c1 - c0);
    DeviceBuffer x(backend_.get(), static_cast<size_t>(batch.rows) * d);
    backend_->Embed(tokens.data() + c0, batch.rows, dw_->embed, d, x.get());
    if (!ced) {
      RunLayers(batch, 0, c.num_layers, x.get());
      if (c1 == n) {
        DeviceBuffer logits(backend_.get(), c.vocab_size);
        Logits(x.get() + static_cast<size_t>(batch.rows - 1) * d, 1, logits.get());
        result.logits.resize(c.vocab_size);
        backend_->CopyToHost(result.logits.data(), logits.get(), c.vocab_size * sizeof(float));
      }
    } else {
      RunLayers(batch, 0, c.num_encoder_layers, x.get());
      ProjectDecoderGlobal(batch, x.get());
      const int keep0 = std::max(c0, s);
      if (keep0 < c1) {  // h_E rows the replay will need
        const size_t off = seq->h_e.size();
        seq->h_e.resize(off + static_cast<size_t>(c1 - keep0) * d);
        backend_->CopyToHost(seq->h_e.data() + off,
                             x.get() + static_cast<size_t>(keep0 - c0) * d,
                             static_cast<size_t>(c1 - keep0) * d * sizeof(float));
      }
    }
    // A device fault must not publish or send this chunk's K/V.
    RETURN_IF_ERROR(backend_->status());
    seq->num_tokens = c1;
    PublishBlocks(seq);
    if (options.on_chunk && c1 > p) options.on_chunk(std::max(c0, p), c1);
  }
  RETURN_IF_ERROR(backend_->status());
  seq->prefilled = true;
  seq->own_rings = true;
  seq->replay_done = !ced;
  if (ced && !options.defer_replay) {
    ASSIGN_OR_RETURN(result.logits, Replay(id));
  }
  result.replay_done = seq->replay_done;
  return result;
}

absl::StatusOr<std::vector<float>> Engine::Replay(SeqId id) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  const ModelConfig& c = config_;
  if (!seq->prefilled || seq->replay_done) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " has no pending replay"));
  }
  if (!HoldsDecoder(*weights_)) {
    return absl::FailedPreconditionError("this instance holds no decoder weights to replay");
  }
  const int s = seq->replay_start, n = seq->num_tokens, d = c.hidden_size;
  if (seq->h_e.size() != static_cast<size_t>(n - s) * d) {
    return absl::InternalError("replay: h_E rows missing");
  }
  Batch batch;
  batch.Add(seq, s, n - s);
  DeviceBuffer x(backend_.get(), seq->h_e.size());
  backend_->CopyToDevice(x.get(), seq->h_e.data(), seq->h_e.size() * sizeof(float));
  RunLayers(batch, c.num_encoder_layers, c.num_layers, x.get());
  DeviceBuffer logits(backend_.get(), c.vocab_size);
  Logits(x.get() + static_cast<size_t>(batch.rows - 1) * d, 1, logits.get());
  std::vector<float> out(c.vocab_size);
  backend_->CopyToHost(out.data(), logits.get(), c.vocab_size * sizeof(float));
  RETURN_IF_ERROR(backend_->status());
  seq->replay_done = true;
  seq->h_e.clear();
  seq->h_e.shrink_to_fit();
  return out;
}

absl::StatusOr<std::vector<float>> Engine::Decode(absl::Span<const DecodeInput> inputs) {
  const ModelConfig& c = config_;
  if (inputs.empty()) return std::vector<float>();
  if (!HoldsDecoder(*weights_)) {
    return absl::FailedPreconditionError("this instance holds no decoder weights to decode");
  }
  Batch batch;
  std::unordered_set<SeqId> seen;
  std::vector<int32_t> tokens;
  for (const DecodeInput& in : inputs) {
    ASSIGN_OR_RETURN(Sequence * seq, Find(in.seq));
    if (!seen.insert(in.seq).second) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", in.seq, " appears twice"));
    }
    if (!seq->prefilled || !seq->replay_done) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", in.seq, " is not ready to decode (prefill or replay pending)"));
    }
    if (seq->num_tokens >= seq->capacity) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", in.seq, " reached its reserved ",
                                                seq->capacity, " positions"));
    }
    RETURN_IF_ERROR(CheckTokens(absl::MakeConstSpan(&in.token, 1)));
    batch.Add(seq, seq->num_tokens, 1);
    tokens.push_back(in.token);
  }
  const int B = batch.rows, d = c.hidden_size;
  DeviceBuffer x(backend_.get(), static_cast<size_t>(B) * d);
  backend_->Embed(tokens.data(), B, dw_->embed, d, x.get());
  if (c.IsDecoderOnly()) {
    RunLayers(batch, 0, c.num_layers, x.get());
  } else {
    RunLayers(batch, 0, c.num_encoder_layers, x.get());
    ProjectDecoderGlobal(batch, x.get());
    RunLayers(batch, c.num_encoder_layers, c.num_layers, x.get());
  }
  DeviceBuffer logits(backend_.get(), static_cast<size_t>(B) * c.vocab_size);
  Logits(x.get(), B, logits.get());
  std::vector<float> out(static_cast<size_t>(B) * c.vocab_size);
  backend_->CopyToHost(out.data(), logits.get(), out.size() * sizeof(float));
  // A device fault fails the step: no token comes from its logits.
  RETURN_IF_ERROR(backend_->status());
  for (size_t i = 0; i < batch.segments.size(); ++i) {
    Sequence* seq = batch.segments[i].seq;
    if (static_cast<int>(seq->tokens.size()) == seq->num_tokens) seq->tokens.push_back(tokens[i]);
    seq->num_tokens += 1;
    PublishBlocks(seq);
  }
  return out;
}

absl::Status Engine::WarmUp(int prompt_tokens, int chunk_tokens, int decode_steps) {
  const ModelConfig& c = config_;
  const bool decoder = c.IsDecoderOnly() || HoldsDecoder(*weights_);
  if (!decoder) decode_steps = 0;
  // Within the context and what the cache has room for (a tiny cache warms
  // up on fewer positions; the weights are packed all the same).
  const CacheStats stats = cache_stats();
  const int n = std::min({prompt_tokens, c.max_position - decode_steps - 1,
                          stats.available_blocks() * stats.block_size - decode_steps});
  if (n < 1) return absl::OkStatus();
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = i % c.vocab_size;
  ASSIGN_OR_RETURN(const SeqId id, CreateSequence(n + decode_steps));
  {
    std::unique_lock<std::shared_mutex> lock(seq_mu_);
    ASSIGN_OR_RETURN(Sequence * seq, Find(id));
    seq->throwaway = true;
  }
  PrefillOptions options;
  options.chunk_tokens = std::max(1, chunk_tokens);
  options.defer_replay = !decoder;
  absl::Status status = Prefill(id, tokens, options).status();
  for (int i = 0; status.ok() && i < decode_steps; ++i) {
    const DecodeInput input{id, static_cast<int32_t>((n + i) % c.vocab_size)};
    status = Decode({&input, 1}).status();
  }
  const absl::Status released = ReleaseSequence(id);
  RETURN_IF_ERROR(status);
  return released;
}

}  // namespace ced
