// The shared KV tier on Redis (DESIGN.md §2 "KV tiers"; issue 16): any worker
// can resume any session, and sessions outlive worker restarts.
//
// Blocks (engine/kv/block_store.h: header + payload) are plain string values
// under `ced:kv:<model root hex>:<block hash hex>`; a prompt's longest stored
// prefix is read in MGETs and a sequence's blocks written in pipelined SETs,
// `keys_per_command` blocks per round trip. Redis's own
// eviction (maxmemory-policy allkeys-lru, set in deploy/) or an optional TTL
// bounds the memory; a full Redis answers SET with an error, counted.
//
// Degrades, never fails: every command is bounded by connect and I/O timeouts;
// an error drops the connection, counts ced_kv_tier_errors_total{tier="redis"}
// and for `retry_after_ms` every operation returns at once as a miss (counted)
// before one reconnect is tried. Reads and writes use separate connections,
// so a slow pipeline of writes never queues a request's read behind it.
//
// TLS (`rediss://`): Debian 12's hiredis is 0.14, which has no TLS
// (hiredis_ssl came with 1.0), so each connection of a TLS store is a
// TlsRelay (tls_relay.h): hiredis speaks plain RESP on a socketpair whose
// other end a relay thread pumps through OpenSSL to Redis (server verified
// against the CA file or the system's store and the URL's host; optional
// client certificate for mutual TLS). A failed handshake or a broken TLS
// connection is an error + miss like any other. AUTH (Redis 6 ACL user +
// password, or a password alone) is supported over both.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/kv/block_store.h"

struct redisContext;

namespace ced::services {

class TlsRelay;

struct RedisStoreOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string user;      // empty: AUTH with the password alone (the "default" user)
  std::string password;  // empty: no AUTH
  int connect_timeout_ms = 200;
  int io_timeout_ms = 250;
  int retry_after_ms = 1000;
  int ttl_s = 0;  // 0: no expiry
  int max_keys_per_read = 4096;
  // Blocks per MGET of a prefix read (its MGETs run one after the other,
  // each within io_timeout_ms, stopping at the first missing block), and per
  // round of a write's pipelined SETs (its replies read before the next
  // round). Small: hiredis grows its buffers 1 MiB at a time past 1 MiB,
  // copying them whole at each step, so a 12 MiB reply (32 blocks of
  // `small`) was copied about six times over; a round trip costs far less.
  int keys_per_command = 4;
  std::string key_prefix = "ced:kv:";
  // TLS (rediss://). The files are PEM, read at Create (errors name the
  // --kv-store-tls-* flag) and again at each connect (rotated Secrets).
  bool tls = false;
  std::string tls_ca_file;    // empty: the system's trust store
  std::string tls_cert_file;  // client certificate (mutual TLS), with tls_key_file
  std::string tls_key_file;
};

// redis[s]://[[user]:password@]host[:port][/db]. Percent-escapes in user and
// password are decoded. rediss:// sets `tls` (port 6379 unless given).
absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url);

// The key of a block.
std::string RedisBlockKey(std::string_view prefix, const BlockHash& root, const BlockHash& hash);

class RedisBlockStore final : public KvBlockStore {
 public:
  // Does not connect: the first operation does (so a worker starts while
  // Redis is down, and uses it once it is up). INVALID_ARGUMENT for bad
  // options, TLS files on a non-TLS store, a certificate without its key, or
  // a TLS file that cannot be read or parsed (naming its flag).
  static absl::StatusOr<std::shared_ptr<RedisBlockStore>> Create(const RedisStoreOptions& options);
  ~RedisBlockStore() override;

  std::string_view name() const override { return "redis"; }
  absl::Status Put(const BlockHash& root, absl::Span<const KvStoredBlock> blocks) override;
  std::vector<std::string> GetPrefix(const BlockHash& root,
                                     absl::Span<const BlockHash> hashes) override;
  // Each block handed over from the MGET reply that holds it (no copy).
  size_t VisitPrefix(const BlockHash& root, absl::Span<const BlockHash> hashes,
                     const BlockVisitor& take) override;
  int Contains(const BlockHash& root, absl::Span<const BlockHash> hashes) override;
  void Erase(const BlockHash& root, const BlockHash& hash) override;
  // TOUCH in commands of up to 256 keys, on the writer's connection.
  void Touch(const BlockHash& root, absl::Span<const BlockHash> hashes) override;

  const RedisStoreOptions& options() const { return options_; }

 private:
  struct Conn {
    std::mutex mu;
    redisContext* ctx = nullptr;
    std::unique_ptr<TlsRelay> relay;  // TLS stores: the relay behind ctx's socket
    std::chrono::steady_clock::time_point retry_at{};
  };
  explicit RedisBlockStore(RedisStoreOptions options);
  // The connection, connecting when due; null (an error counted) otherwise.
  redisContext* Connected(Conn& c);
  // Drops a connection that failed and starts the back-off.
  void Broken(Conn& c);

  RedisStoreOptions options_;
  Conn read_, write_;
};

}  // namespace ced::services
