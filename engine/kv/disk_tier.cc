#include "engine/kv/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace ced {
namespace {

constexpr char kSuffix[] = ".kvb";

bool ParseHex(std::string_view hex, BlockHash* out) {
  if (hex.size() != 32) return false;
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else return false;
    parts[i / 16] = (parts[i / 16] << 4) | static_cast<uint64_t>(v);
  }
  *out = BlockHash{parts[0], parts[1]};
  return true;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskBlockStore>> DiskBlockStore::Create(const Options& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("disk tier: no directory");
  if (options.capacity_bytes <= 0) {
    return absl::InvalidArgumentError("disk tier: capacity must be positive");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk tier: cannot create ", options.dir, ": ", ec.message()));
  }
  std::unique_ptr<DiskBlockStore> store(new DiskBlockStore(options));
  if (absl::Status s = store->Index(); !s.ok()) return s;
  return store;
}

absl::Status DiskBlockStore::Index() {
  struct Found {
    BlockHash hash;
    int64_t size;
    std::filesystem::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(options_.dir, ec)) {
    const std::string name = e.path().filename().string();
    BlockHash h;
    if (name.size() == 32 + 4 && name.substr(32) == kSuffix && ParseHex(name.substr(0, 32), &h) &&
        e.is_regular_file(ec)) {
      found.push_back({h, static_cast<int64_t>(e.file_size(ec)), e.last_write_time(ec)});
    } else if (name.rfind(".tmp-", 0) == 0) {
      std::filesystem::remove(e.path(), ec);  // an interrupted write
    }
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("disk tier: ", options_.dir, ": ", ec.message()));
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) {
    files_[f.hash] = Entry{f.size, lru_.insert(lru_.end(), f.hash)};
    bytes_ += f.size;
  }
  while (bytes_ > options_.capacity_bytes && !lru_.empty()) DropLocked(lru_.front());
  return absl::OkStatus();
}

std::string DiskBlockStore::PathOf(const BlockHash& hash) const {
  return absl::StrCat(options_.dir, "/", hash.Hex(), kSuffix);
}

void DiskBlockStore::DropLocked(const BlockHash& hash) {
  auto it = files_.find(hash);
  if (it == files_.end()) return;
  bytes_ -= it->second.size;
  lru_.erase(it->second.lru);
  files_.erase(it);
  std::remove(PathOf(hash).c_str());
}

absl::Status DiskBlockStore::Put(const BlockHash&, absl::Span<const KvStoredBlock> blocks) {
  absl::Status status;
  for (const KvStoredBlock& b : blocks) {
    const int64_t size = static_cast<int64_t>(b.bytes->size());
    if (size > options_.capacity_bytes) {
      counters_.dropped_writes.fetch_add(1);
      continue;
    }
    std::string tmp;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = files_.find(b.hash);
      if (it != files_.end() && it->second.size == size) {
        // Held already: the same bytes (block_store.h); no write.
        lru_.splice(lru_.end(), lru_, it->second.lru);
        continue;
      }
      tmp = absl::StrCat(options_.dir, "/.tmp-", getpid(), "-", tmp_counter_++);
    }
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && WriteAll(fd, b.bytes->data(), b.bytes->size());
    if (fd >= 0) ok = (::close(fd) == 0) && ok;
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      DropLocked(b.hash);
      while (bytes_ + size > options_.capacity_bytes && !lru_.empty()) DropLocked(lru_.front());
      ok = std::rename(tmp.c_str(), PathOf(b.hash).c_str()) == 0;
    }
    if (!ok) {
      std::remove(tmp.c_str());
      counters_.errors.fetch_add(1);
      status = absl::UnavailableError(absl::StrCat("disk tier: writing ", PathOf(b.hash), ": ",
                                                   std::strerror(errno)));
      continue;
    }
    files_[b.hash] = Entry{size, lru_.insert(lru_.end(), b.hash)};
    bytes_ += size;
    counters_.written_bytes.fetch_add(size);
    counters_.written_blocks.fetch_add(1);
  }
  return status;
}

bool DiskBlockStore::ReadFile(const BlockHash& hash, int64_t size, std::string* out) {
  out->resize(static_cast<size_t>(size));
  const int fd = ::open(PathOf(hash).c_str(), O_RDONLY | O_CLOEXEC);
  int64_t done = 0;
  if (fd >= 0) {
    while (done < size) {
      const ssize_t n = ::pread(fd, out->data() + done, static_cast<size_t>(size - done), done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += n;
    }
    ::close(fd);
  }
  if (done == size) return true;
  // Removed or cut short under us (another process, an operator): a miss.
  counters_.errors.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  DropLocked(hash);
  return false;
}

std::vector<std::string> DiskBlockStore::GetPrefix(const BlockHash& root,
                                                   absl::Span<const BlockHash> hashes) {
  std::vector<std::string> out;
  VisitPrefix(root, hashes, [&out](size_t, std::string_view bytes) {
    out.emplace_back(bytes);
    return true;
  });
  return out;
}

size_t DiskBlockStore::VisitPrefix(const BlockHash&, absl::Span<const BlockHash> hashes,
                                   const BlockVisitor& take) {
  // One buffer per reading thread, kept between calls: the tiers read a run
  // one block per call, and a fresh 384 KiB buffer each time cost ~100 page
  // faults (~30 us each on a VM), more than the read itself.
  thread_local std::string buffer;
  size_t i = 0;
  for (; i < hashes.size(); ++i) {
    int64_t size;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = files_.find(hashes[i]);
      if (it == files_.end()) break;
      lru_.splice(lru_.end(), lru_, it->second.lru);
      size = it->second.size;
    }
    if (!ReadFile(hashes[i], size, &buffer) || !take(i, buffer)) break;
  }
  return i;
}

int DiskBlockStore::Contains(const BlockHash&, absl::Span<const BlockHash> hashes) {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  while (n < static_cast<int>(hashes.size()) && files_.count(hashes[n]) > 0) ++n;
  return n;
}

void DiskBlockStore::Erase(const BlockHash&, const BlockHash& hash) {
  std::lock_guard<std::mutex> lock(mu_);
  DropLocked(hash);
}

int64_t DiskBlockStore::resident_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(files_.size());
}

int64_t DiskBlockStore::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace ced
