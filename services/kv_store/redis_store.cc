#include "services/kv_store/redis_store.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <climits>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/kv_store/tls_relay.h"

namespace ced::services {
namespace {

using Clock = std::chrono::steady_clock;

timeval Ms(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

Reply Command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return Reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

bool Percent(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size() || !std::isxdigit(static_cast<unsigned char>(in[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
      return false;
    }
    out->push_back(static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16)));
    i += 2;
  }
  return true;
}

TlsClientOptions TlsOptions(const RedisStoreOptions& o) {
  TlsClientOptions t;
  t.host = o.host;
  t.port = o.port;
  t.ca_file = o.tls_ca_file;
  t.cert_file = o.tls_cert_file;
  t.key_file = o.tls_key_file;
  t.connect_timeout_ms = o.connect_timeout_ms;
  return t;
}

// Operators see why TLS fails (a wrong CA, an expired certificate): one
// line per distinct reason, not one per retry.
void LogTlsError(const absl::Status& s) {
  static std::mutex mu;
  static std::string* last = new std::string;
  std::lock_guard<std::mutex> lock(mu);
  if (*last == s.message()) return;
  *last = std::string(s.message());
  std::fprintf(stderr, "kv store: %s (counted in ced_kv_tier_errors_total; requests recompute)\n",
               last->c_str());
}

// One RESP bulk string's header: "$<len>\r\n".
void AppendBulkHeader(size_t len, std::string* out) { absl::StrAppend(out, "$", len, "\r\n"); }

// Writes every byte of `iov` to the blocking socket `fd` (its send timeout
// bounds each write); false on an error or a timeout. MSG_NOSIGNAL: a Redis
// that went away mid-write is an error here, never a SIGPIPE that would end
// the worker.
bool WriteAllIov(int fd, std::vector<iovec>& iov) {
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    size_t left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url_in) {
  // Debian's Abseil has its own string_view.
  const absl::string_view url(url_in.data(), url_in.size());
  RedisStoreOptions o;
  constexpr absl::string_view kScheme = "redis://", kTlsScheme = "rediss://";
  absl::string_view rest;
  if (url.substr(0, kScheme.size()) == kScheme) {
    rest = url.substr(kScheme.size());
  } else if (url.substr(0, kTlsScheme.size()) == kTlsScheme) {
    rest = url.substr(kTlsScheme.size());
    o.tls = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-store: '", url, "' is not redis[s]://[user:password@]host[:port][/db]"));
  }
  const size_t at = rest.rfind('@');
  if (at != absl::string_view::npos) {
    absl::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = cred.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError("--kv-store: credentials must be user:password or :password");
    }
    if (!Percent(cred.substr(0, colon), &o.user) || !Percent(cred.substr(colon + 1), &o.password)) {
      return absl::InvalidArgumentError("--kv-store: bad percent-escape in the credentials");
    }
  }
  const size_t slash = rest.find('/');
  if (slash != absl::string_view::npos) {
    const absl::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &o.db) || o.db < 0 || o.db > 1 << 16)) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-store: bad database number '", db, "'"));
    }
    rest = rest.substr(0, slash);
  }
  absl::string_view host = rest;
  if (!rest.empty() && rest.front() == '[') {  // [v6]:port
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) return absl::InvalidArgumentError("--kv-store: bad host");
    host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return absl::InvalidArgumentError("--kv-store: bad host");
    if (!rest.empty() && !absl::SimpleAtoi(rest.substr(1), &o.port)) {
      return absl::InvalidArgumentError("--kv-store: bad port");
    }
  } else if (const size_t colon = rest.rfind(':'); colon != absl::string_view::npos) {
    host = rest.substr(0, colon);
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &o.port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-store: bad port '", rest.substr(colon + 1), "'"));
    }
  }
  if (host.empty()) return absl::InvalidArgumentError("--kv-store: no host");
  if (o.port <= 0 || o.port > 65535) return absl::InvalidArgumentError("--kv-store: port out of range");
  o.host = std::string(host);
  return o;
}

std::string RedisBlockKey(std::string_view prefix, const BlockHash& root, const BlockHash& hash) {
  return absl::StrCat(std::string(prefix), root.Hex(), ":", hash.Hex());
}

absl::StatusOr<std::shared_ptr<RedisBlockStore>> RedisBlockStore::Create(
    const RedisStoreOptions& options) {
  if (options.host.empty() || options.port <= 0 || options.port > 65535) {
    return absl::InvalidArgumentError("redis store: bad address");
  }
  if (options.connect_timeout_ms <= 0 || options.io_timeout_ms <= 0 ||
      options.retry_after_ms < 0 || options.ttl_s < 0 || options.max_keys_per_read <= 0 ||
      options.keys_per_command <= 0) {
    return absl::InvalidArgumentError("redis store: timeouts must be positive");
  }
  for (const auto& [flag, file] :
       {std::pair<const char*, const std::string*>{"ca", &options.tls_ca_file},
        {"cert", &options.tls_cert_file}, {"key", &options.tls_key_file}}) {
    if (!file->empty() && !options.tls) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-store-tls-", flag, " needs a rediss:// --kv-store"));
    }
  }
  if (options.tls) {
    absl::Status s = CheckTlsClientFiles(TlsOptions(options));
    if (!s.ok()) return s;
  }
  return std::shared_ptr<RedisBlockStore>(new RedisBlockStore(options));
}

RedisBlockStore::RedisBlockStore(RedisStoreOptions options) : options_(std::move(options)) {}

RedisBlockStore::~RedisBlockStore() {
  for (Conn* c : {&read_, &write_}) {
    if (c->ctx != nullptr) redisFree(c->ctx);
    c->relay.reset();  // joins its thread
  }
}

void RedisBlockStore::Broken(Conn& c) {
  counters_.errors.fetch_add(1);
  if (c.ctx != nullptr) redisFree(c.ctx);
  c.ctx = nullptr;
  c.relay.reset();
  c.retry_at = Clock::now() + std::chrono::milliseconds(options_.retry_after_ms);
}

redisContext* RedisBlockStore::Connected(Conn& c) {
  if (c.ctx != nullptr) return c.ctx;
  if (Clock::now() < c.retry_at) {  // backing off: a miss at once
    counters_.errors.fetch_add(1);
    return nullptr;
  }
  if (options_.tls) {
    absl::StatusOr<std::unique_ptr<TlsRelay>> relay = TlsRelay::Connect(TlsOptions(options_));
    if (!relay.ok()) {
      LogTlsError(relay.status());
      Broken(c);
      return nullptr;
    }
    c.relay = *std::move(relay);
    c.ctx = redisConnectFd(c.relay->ReleaseClientFd());
  } else {
    c.ctx = redisConnectWithTimeout(options_.host.c_str(), options_.port,
                                    Ms(options_.connect_timeout_ms));
  }
  if (c.ctx == nullptr || c.ctx->err != 0 || redisSetTimeout(c.ctx, Ms(options_.io_timeout_ms)) != REDIS_OK) {
    Broken(c);
    return nullptr;
  }
  // Keep the reply buffer between replies (hiredis frees it past 16 KiB
  // when a reply is consumed): every MGET of blocks would otherwise grow a
  // new one from nothing, in fresh pages.
  c.ctx->reader->maxbuf = 0;
  auto ok = [](const Reply& r) { return r != nullptr && r->type != REDIS_REPLY_ERROR; };
  if (!options_.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!options_.user.empty()) auth.push_back(options_.user);
    auth.push_back(options_.password);
    if (!ok(Command(c.ctx, auth))) {
      Broken(c);
      return nullptr;
    }
  }
  if (options_.db != 0 && !ok(Command(c.ctx, {"SELECT", std::to_string(options_.db)}))) {
    Broken(c);
    return nullptr;
  }
  return c.ctx;
}

absl::Status RedisBlockStore::Put(const BlockHash& root, absl::Span<const KvStoredBlock> blocks) {
  if (blocks.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(write_.mu);
  redisContext* ctx = Connected(write_);
  if (ctx == nullptr) return absl::UnavailableError("redis: not connected");
  const std::string ttl = std::to_string(options_.ttl_s);
  absl::Status status;
  // Pipelined SETs, keys_per_command at a time: each round's bytes leave
  // and its replies come back within the I/O timeout. The commands are
  // written as RESP straight from the blocks' own buffers (one sendmsg per
  // round; the connection is plain TCP, a TLS store's being the local
  // relay's): hiredis would format each 384 KiB value into a fresh buffer
  // and append that to its output buffer, two copies into fresh memory per
  // block. hiredis reads the replies (its output buffer is empty between
  // calls).
  const size_t step = static_cast<size_t>(std::max(1, options_.keys_per_command));
  std::vector<std::string> heads;
  std::vector<iovec> iov;
  std::string tail = "\r\n";
  if (options_.ttl_s > 0) {
    tail += "$2\r\nEX\r\n";
    AppendBulkHeader(ttl.size(), &tail);
    absl::StrAppend(&tail, ttl, "\r\n");
  }
  for (size_t first = 0; first < blocks.size(); first += step) {
    const absl::Span<const KvStoredBlock> part = blocks.subspan(first, step);
    heads.assign(part.size(), std::string());
    iov.clear();
    for (size_t i = 0; i < part.size(); ++i) {
      const KvStoredBlock& b = part[i];
      const std::string key = RedisBlockKey(options_.key_prefix, root, b.hash);
      std::string& head = heads[i];
      absl::StrAppend(&head, options_.ttl_s > 0 ? "*5\r\n" : "*3\r\n", "$3\r\nSET\r\n");
      AppendBulkHeader(key.size(), &head);
      absl::StrAppend(&head, key, "\r\n");
      AppendBulkHeader(b.bytes->size(), &head);
      iov.push_back({head.data(), head.size()});
      iov.push_back({const_cast<char*>(b.bytes->data()), b.bytes->size()});
      iov.push_back({tail.data(), tail.size()});
    }
    if (!WriteAllIov(ctx->fd, iov)) {
      Broken(write_);
      return absl::UnavailableError("redis: write failed or timed out");
    }
    for (const KvStoredBlock& b : part) {
      void* raw = nullptr;
      if (redisGetReply(ctx, &raw) != REDIS_OK) {
        Broken(write_);
        return absl::UnavailableError("redis: connection lost");
      }
      Reply r(static_cast<redisReply*>(raw));
      if (r->type == REDIS_REPLY_ERROR) {  // e.g. OOM: Redis is full
        counters_.errors.fetch_add(1);
        status =
            absl::ResourceExhaustedError(absl::StrCat("redis: ", std::string(r->str, r->len)));
        continue;
      }
      counters_.written_bytes.fetch_add(static_cast<int64_t>(b.bytes->size()));
      counters_.written_blocks.fetch_add(1);
    }
  }
  return status;
}

std::vector<std::string> RedisBlockStore::GetPrefix(const BlockHash& root,
                                                    absl::Span<const BlockHash> hashes) {
  std::vector<std::string> out;
  VisitPrefix(root, hashes, [&out](size_t, std::string_view bytes) {
    out.emplace_back(bytes);
    return true;
  });
  return out;
}

size_t RedisBlockStore::VisitPrefix(const BlockHash& root, absl::Span<const BlockHash> hashes,
                                    const BlockVisitor& take) {
  if (hashes.empty()) return 0;
  hashes = hashes.first(std::min<size_t>(hashes.size(), options_.max_keys_per_read));
  std::lock_guard<std::mutex> lock(read_.mu);
  redisContext* ctx = Connected(read_);
  if (ctx == nullptr) return 0;
  // One MGET per keys_per_command blocks, in order, until a block is
  // missing: each reply is small enough to arrive within the I/O timeout
  // (one MGET of a long prefix is hundreds of MiB that Redis assembles
  // before the first byte), and nothing past the prefix's end is read. Each
  // block goes to `take` straight from the reply.
  const size_t step = static_cast<size_t>(std::max(1, options_.keys_per_command));
  size_t taken = 0;
  for (size_t first = 0; first < hashes.size(); first += step) {
    const absl::Span<const BlockHash> part = hashes.subspan(first, step);
    std::vector<std::string> args = {"MGET"};
    for (const BlockHash& h : part) args.push_back(RedisBlockKey(options_.key_prefix, root, h));
    Reply r = Command(ctx, args);
    if (r == nullptr) {
      Broken(read_);
      return taken;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
      counters_.errors.fetch_add(1);
      return taken;
    }
    for (size_t i = 0; i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      if (e->type != REDIS_REPLY_STRING) return taken;
      if (!take(taken, std::string_view(e->str, e->len))) return taken;
      ++taken;
    }
    if (r->elements < part.size()) return taken;
  }
  return taken;
}

int RedisBlockStore::Contains(const BlockHash& root, absl::Span<const BlockHash> hashes) {
  if (hashes.empty()) return 0;
  hashes = hashes.first(std::min<size_t>(hashes.size(), options_.max_keys_per_read));
  std::lock_guard<std::mutex> lock(read_.mu);
  redisContext* ctx = Connected(read_);
  if (ctx == nullptr) return 0;
  for (const BlockHash& h : hashes) {
    const std::string key = RedisBlockKey(options_.key_prefix, root, h);
    const char* argv[2] = {"EXISTS", key.data()};
    const size_t lens[2] = {6, key.size()};
    if (redisAppendCommandArgv(ctx, 2, argv, lens) != REDIS_OK) {
      Broken(read_);
      return 0;
    }
  }
  int run = 0;
  bool stopped = false;
  for (size_t i = 0; i < hashes.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx, &raw) != REDIS_OK) {
      Broken(read_);
      return 0;
    }
    Reply r(static_cast<redisReply*>(raw));
    if (!stopped && r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
      ++run;
    } else {
      stopped = true;
    }
  }
  return run;
}

void RedisBlockStore::Touch(const BlockHash& root, absl::Span<const BlockHash> hashes) {
  constexpr size_t kKeysPerCommand = 256;
  std::lock_guard<std::mutex> lock(write_.mu);
  for (size_t i = 0; i < hashes.size(); i += kKeysPerCommand) {
    redisContext* ctx = Connected(write_);
    if (ctx == nullptr) return;
    std::vector<std::string> args = {"TOUCH"};
    for (const BlockHash& h : hashes.subspan(i, kKeysPerCommand)) {
      args.push_back(RedisBlockKey(options_.key_prefix, root, h));
    }
    Reply r = Command(ctx, args);
    if (r == nullptr) {
      Broken(write_);
      return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      counters_.errors.fetch_add(1);
      return;
    }
  }
}

void RedisBlockStore::Erase(const BlockHash& root, const BlockHash& hash) {
  std::lock_guard<std::mutex> lock(write_.mu);
  redisContext* ctx = Connected(write_);
  if (ctx == nullptr) return;
  if (Command(ctx, {"DEL", RedisBlockKey(options_.key_prefix, root, hash)}) == nullptr) {
    Broken(write_);
  }
}

}  // namespace ced::services
