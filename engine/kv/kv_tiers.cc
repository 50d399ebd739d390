#include "engine/kv/kv_tiers.h"

#include <cstring>

#include "engine/kv/disk_tier.h"
#include "engine/kv/host_tier.h"

namespace ced {
namespace {

// Entries remembered as already in the shared store; past this the memory is
// dropped (at worst a block is written twice).
constexpr size_t kKnownSharedLimit = 1 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<KvTiers>> KvTiers::Create(const KvTiersOptions& options) {
  if (options.layout.block_size <= 0 || options.layout.payload_bytes == 0) {
    return absl::InvalidArgumentError("kv tiers: empty block layout");
  }
  if (options.host_bytes < 0 || options.disk_bytes < 0 || options.write_queue_bytes <= 0) {
    return absl::InvalidArgumentError("kv tiers: negative capacity");
  }
  std::unique_ptr<KvTiers> t(new KvTiers(options));
  // Free buffers kept: as many as the write queue holds (a burst of
  // evictions fills it; the writer hands them back as it drains it).
  const size_t block_bytes = kKvBlockHeaderBytes + options.layout.payload_bytes;
  t->buffers_ = std::make_unique<KvBlockBuffers>(
      block_bytes,
      static_cast<size_t>(options.write_queue_bytes) / options.layout.payload_bytes + 1);
  if (!options.disk_dir.empty()) {
    DiskBlockStore::Options d;
    d.dir = options.disk_dir;
    d.capacity_bytes = options.disk_bytes;
    auto disk = DiskBlockStore::Create(d);
    if (!disk.ok()) return disk.status();
    t->disk_ = std::move(*disk);
  }
  if (options.host_bytes > 0) {
    HostBlockStore::Options h;
    h.capacity_bytes = options.host_bytes;
    if (t->disk_ != nullptr) {
      // Runs on the writer thread (the only caller of the host tier's Put).
      h.on_evict = [p = t.get()](const KvStoredBlock& b) {
        (void)p->TimedPut(p->disk_.get(), {b});
      };
    }
    t->host_ = std::make_unique<HostBlockStore>(std::move(h));
  }
  t->shared_ = options.shared;
  t->writer_ = std::thread([p = t.get()] { p->WriterLoop(); });
  return t;
}

KvTiers::~KvTiers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

bool KvTiers::QueueFullLocked() const {
  return queued_bytes_ + static_cast<int64_t>(options_.layout.payload_bytes) >
         options_.write_queue_bytes;
}

bool KvTiers::IsBlock(const std::shared_ptr<std::string>& block) const {
  return block != nullptr && block->size() == buffers_->bytes();
}

bool KvTiers::Enqueue(Job job, KvBlockStore* target) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (QueueFullLocked()) {
      target->counters().dropped_writes.fetch_add(1);
      return false;
    }
    queued_bytes_ += static_cast<int64_t>(options_.layout.payload_bytes);
    if (!job.shared) pending_[job.hash] = job.block;
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

std::shared_ptr<std::string> KvTiers::Wrap(std::string_view payload) {
  if (payload.size() != options_.layout.payload_bytes) return nullptr;
  std::shared_ptr<std::string> block = NewBlock();
  std::memcpy(block->data() + kKvBlockHeaderBytes, payload.data(), payload.size());
  return block;
}

std::shared_ptr<std::string> KvTiers::SpillBuffer() {
  KvBlockStore* target = host_ != nullptr ? host_.get() : disk_.get();
  if (target == nullptr) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (QueueFullLocked()) {
      target->counters().dropped_writes.fetch_add(1);
      return nullptr;
    }
  }
  return NewBlock();
}

void KvTiers::Spill(const BlockHash& hash, std::shared_ptr<std::string> block) {
  KvBlockStore* target = host_ != nullptr ? host_.get() : disk_.get();
  if (target == nullptr || !IsBlock(block)) return;
  Enqueue({false, hash, std::move(block)}, target);
}

void KvTiers::Spill(const BlockHash& hash, std::string_view payload) {
  if (spills()) Spill(hash, Wrap(payload));
}

bool KvTiers::WantsShared(const BlockHash& hash) const {
  if (shared_ == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return known_shared_.count(hash) == 0;
}

void KvTiers::TouchShared(absl::Span<const BlockHash> hashes) {
  if (shared_ == nullptr || hashes.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const BlockHash& h : hashes) {
      if (touches_.size() >= kMaxTouches) break;
      if (known_shared_.count(h) != 0) touches_.push_back(h);
    }
    if (touches_.empty()) return;
  }
  cv_.notify_one();
}

void KvTiers::WriteShared(const BlockHash& hash, std::shared_ptr<std::string> block) {
  if (shared_ == nullptr || !IsBlock(block)) return;
  Enqueue({true, hash, std::move(block)}, shared_.get());
}

void KvTiers::WriteShared(const BlockHash& hash, std::string_view payload) {
  if (shared_ != nullptr) WriteShared(hash, Wrap(payload));
}

void KvTiers::MarkShared(const BlockHash& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  if (known_shared_.size() >= kKnownSharedLimit) known_shared_.clear();
  known_shared_.insert(hash);
}

absl::Status KvTiers::TimedPut(KvBlockStore* tier, absl::Span<const KvStoredBlock> blocks) {
  const std::chrono::nanoseconds outer = nested_put_;
  nested_put_ = std::chrono::nanoseconds(0);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = tier->Put(options_.layout.root, blocks);
  const std::chrono::nanoseconds took = std::chrono::steady_clock::now() - start;
  tier->counters().write_latency.Observe(took - nested_put_);
  nested_put_ = outer + took;
  return status;
}

void KvTiers::WriterLoop() {
  const KvBlockLayout& layout = options_.layout;
  std::vector<BlockHash> touches;
  for (;;) {
    std::deque<Job> batch;
    touches.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !touches_.empty(); });
      if (queue_.empty() && touches_.empty()) return;  // stopping, nothing left
      batch.swap(queue_);
      touches.swap(touches_);
      writing_ = true;
    }
    std::vector<KvStoredBlock> shared;
    int64_t done_bytes = 0;
    for (Job& job : batch) {
      done_bytes += static_cast<int64_t>(layout.payload_bytes);
      // The header, in place: readers of a pending spill read only the
      // payload after it.
      SealKvBlock(layout, job.hash, reinterpret_cast<uint8_t*>(job.block->data()));
      if (job.shared) {
        shared.push_back({job.hash, job.block});
        continue;
      }
      // A block the tier holds already is only marked used there (Put).
      KvBlockStore* target = host_ != nullptr ? host_.get() : disk_.get();
      (void)TimedPut(target, {KvStoredBlock{job.hash, job.block}});
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(job.hash);
      if (it != pending_.end() && it->second == job.block) pending_.erase(it);
    }
    if (!shared.empty() && TimedPut(shared_.get(), shared).ok()) {
      for (const KvStoredBlock& b : shared) MarkShared(b.hash);
    }
    if (!touches.empty()) shared_->Touch(layout.root, touches);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued_bytes_ -= done_bytes;
      writing_ = false;
    }
    idle_cv_.notify_all();
  }
}

void KvTiers::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && touches_.empty() && !writing_; });
}

bool KvTiers::Accept(KvBlockStore* tier, const BlockHash& hash, std::string_view stored) {
  KvTierCounters& c = tier->counters();
  c.read_bytes.fetch_add(static_cast<int64_t>(stored.size()));
  const KvBlockReject why = CheckKvBlock(options_.layout, hash, stored);
  if (why != KvBlockReject::kNone) {
    c.rejected[static_cast<int>(why)].fetch_add(1);
    tier->Erase(options_.layout.root, hash);
    return false;
  }
  return true;
}

std::vector<std::string> KvTiers::FetchPrefix(absl::Span<const BlockHash> hashes) {
  const size_t n = options_.layout.payload_bytes;
  std::vector<std::string> out;
  FetchPrefixInto(hashes, [&out, n](size_t, const uint8_t* payload) {
    out.emplace_back(reinterpret_cast<const char*>(payload), n);
    return true;
  });
  return out;
}

size_t KvTiers::FetchPrefixInto(absl::Span<const BlockHash> hashes, const PayloadSink& take) {
  const BlockHash& root = options_.layout.root;
  const auto payload_of = [](std::string_view stored) {
    return reinterpret_cast<const uint8_t*>(stored.data()) + kKvBlockHeaderBytes;
  };
  size_t i = 0;
  for (; i < hashes.size() && spills(); ++i) {
    const BlockHash& h = hashes[i];
    std::shared_ptr<const std::string> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(h);
      if (it != pending_.end()) pending = it->second;
    }
    if (pending != nullptr) {  // evicted a moment ago, not written yet: its payload
      if (!take(i, payload_of(*pending))) return i;
      KvBlockStore* t = host_ != nullptr ? host_.get() : disk_.get();
      t->counters().hit_blocks.fetch_add(1);
      continue;
    }
    // The first tier that holds the block and whose copy passes its checks.
    enum { kMissing, kTaken, kRefused } result = kMissing;
    for (KvBlockStore* tier : {host_.get(), disk_.get()}) {
      if (tier == nullptr) continue;
      bool valid = false;
      const auto start = std::chrono::steady_clock::now();
      tier->VisitPrefix(root, hashes.subspan(i, 1), [&](size_t, std::string_view stored) {
        valid = Accept(tier, h, stored);
        if (valid) result = take(i, payload_of(stored)) ? kTaken : kRefused;
        return false;  // one block per call: the next may be in another tier
      });
      tier->counters().read_latency.Observe(std::chrono::steady_clock::now() - start);
      if (!valid) {
        tier->counters().miss_blocks.fetch_add(1);
        continue;
      }
      if (result == kTaken) tier->counters().hit_blocks.fetch_add(1);
      break;
    }
    if (result == kRefused) return i;
    if (result == kMissing) break;
  }
  if (i < hashes.size() && shared_ != nullptr) {
    const absl::Span<const BlockHash> rest = hashes.subspan(i);
    size_t taken = 0;
    bool refused = false;
    const auto start = std::chrono::steady_clock::now();
    shared_->VisitPrefix(root, rest, [&](size_t j, std::string_view stored) {
      if (!Accept(shared_.get(), rest[j], stored)) return false;
      if (!take(i + j, payload_of(stored))) {
        refused = true;
        return false;
      }
      MarkShared(rest[j]);
      ++taken;
      return true;
    });
    shared_->counters().read_latency.Observe(std::chrono::steady_clock::now() - start);
    shared_->counters().hit_blocks.fetch_add(static_cast<int64_t>(taken));
    if (!refused) {
      shared_->counters().miss_blocks.fetch_add(static_cast<int64_t>(rest.size() - taken));
    }
    i += taken;
  }
  return i;
}

std::vector<KvTierStats> KvTiers::stats() const {
  std::vector<KvTierStats> out;
  for (const KvBlockStore* t : {host_.get(), disk_.get(), shared_.get()}) {
    if (t != nullptr) out.push_back(t->stats());
  }
  return out;
}

}  // namespace ced
