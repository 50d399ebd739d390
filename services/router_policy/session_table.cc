#include "services/router_policy/session_table.h"

#include <algorithm>
#include <utility>

namespace ced::router {

std::optional<SessionPlacement> SessionTable::Find(const std::string& session_id,
                                                   absl::Time now) const {
  for (const auto* map : {&current_, &previous_}) {
    auto it = map->find(session_id);
    if (it == map->end()) continue;
    if (now - it->second.last_used > options_.ttl) return std::nullopt;
    return it->second;
  }
  return std::nullopt;
}

void SessionTable::Record(const std::string& session_id, const SessionPlacement& placement) {
  previous_.erase(session_id);
  auto it = current_.find(session_id);
  if (it != current_.end()) {
    it->second = placement;
    return;
  }
  const int64_t half = std::max<int64_t>(1, options_.max_sessions / 2);
  if (static_cast<int64_t>(current_.size()) >= half) {
    previous_ = std::move(current_);
    current_ = absl::flat_hash_map<std::string, SessionPlacement>();
  }
  current_.emplace(session_id, placement);
}

}  // namespace ced::router
