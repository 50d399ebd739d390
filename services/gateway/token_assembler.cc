#include "services/gateway/token_assembler.h"

#include <algorithm>
#include <utility>

namespace ced::gateway {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

const std::string& StopMatcher::matched_string() const {
  static const std::string kEmpty;
  return matched_ >= 0 ? stops_[matched_] : kEmpty;
}

std::string StopMatcher::Feed(const std::string& text) {
  if (matched()) return "";
  held_ += text;
  if (stops_.empty()) return std::exchange(held_, "");
  // The earliest match wins (the longest stop string on a tie).
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = held_.find(stops_[i]);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stops_[i].size() > stops_[matched_].size())) {
      best_pos = pos;
      matched_ = static_cast<int>(i);
    }
  }
  if (matched()) {
    std::string out = held_.substr(0, best_pos);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() { return std::exchange(held_, ""); }

TokenAssembler::TokenAssembler(const Tokenizer* tokenizer, std::vector<std::string> stop_strings,
                               int max_tokens)
    : decoder_(tokenizer), stop_(std::move(stop_strings)), max_tokens_(max_tokens) {}

void TokenAssembler::Add(
    int start_step, absl::Span<const int32_t> ids,
    const google::protobuf::RepeatedPtrField<ced::internal::StepLogprobs>* logprobs) {
  const bool with_logprobs =
      logprobs != nullptr && static_cast<size_t>(logprobs->size()) == ids.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (start_step < 0) return;
    const int step = start_step + static_cast<int>(i);
    if (step >= max_tokens_) return;
    if (step < next_step_) {
      if (emitted_ids_[step] != ids[i]) ++mismatches_;
      continue;
    }
    auto [it, inserted] = pending_.try_emplace(step);
    Step& s = it->second;
    if (inserted) {
      s.token = ids[i];
    } else if (s.token != ids[i]) {
      ++mismatches_;
      continue;
    }
    if (with_logprobs && !s.has_logprobs) {
      s.has_logprobs = true;
      s.logprobs = (*logprobs)[static_cast<int>(i)];
    }
  }
}

TokenAssembler::Output TokenAssembler::TakeReady() {
  Output out;
  while (!stop_.matched() && !pending_.empty() && pending_.begin()->first == next_step_) {
    Step& s = pending_.begin()->second;
    const int32_t id = s.token;
    if (s.has_logprobs) out.logprobs.push_back(std::move(s.logprobs));
    pending_.erase(pending_.begin());
    out.token_ids.push_back(id);
    emitted_ids_.push_back(id);
    ++next_step_;
    out.text += stop_.Feed(decoder_.Feed(id));
  }
  if (stop_.matched()) pending_.clear();
  return out;
}

std::string TokenAssembler::Finish() {
  if (stop_.matched()) return "";
  std::string out = stop_.Feed(decoder_.Flush());
  if (!stop_.matched()) out += stop_.Flush();
  return out;
}

}  // namespace ced::gateway
