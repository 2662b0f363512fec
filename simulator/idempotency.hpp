// The simulator's Idempotency-Key store: a repeated key replays the stored response and applies
// nothing, a key reused for a different request is refused, and concurrent requests with one key
// apply once. Bounded: at most 200 000 keys and 64 MiB of stored responses (by default), the
// oldest completed key evicted first; a key older than that is treated as new.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace outboxd::simulator {

/// A response as it was sent, kept for replays.
struct stored_response {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers; // besides Content-Type
};

/// The answer to a claim on a key.
struct idempotency_claim {
  enum class kind {
    owner,    // first use (or the previous owner failed): apply, then complete() or abandon()
    replay,   // done before with the same request: answer `response`, apply nothing
    conflict, // used before (or in flight) with a different request: refuse with 422
    in_flight // (only for a claim that does not wait) the same request is in flight: ask again
  };
  kind what = kind::owner;
  stored_response response; // for replay
  std::uint64_t token = 0;  // for owner: identifies this claim to complete()/abandon()
};

/// Thread-safe. Keys are scoped (the simulator uses the operation), so one key may be used
/// once per operation.
class idempotency_store {
public:
  static constexpr std::size_t default_max_keys = 200000;
  static constexpr std::size_t default_max_bytes = std::size_t{64} << 20;

  explicit idempotency_store(std::size_t max_keys = default_max_keys,
                             std::size_t max_bytes = default_max_bytes);

  /// Claims `key` for a request with `fingerprint`. While another request with the same key and
  /// fingerprint is in flight, waits for it: its completion gives a replay, its abandonment
  /// hands ownership to one waiter. With `wait` false it answers `in_flight` instead of waiting.
  idempotency_claim begin(const std::string& scope, const std::string& key,
                          std::uint64_t fingerprint, bool wait = true);

  /// Stores the owner's response for replays. Ignored when the claim is stale (after clear()).
  void complete(const std::string& scope, const std::string& key, std::uint64_t token,
                stored_response response);

  /// Forgets the owner's claim without storing anything (failures are not remembered, so a
  /// retry with the same key tries again).
  void abandon(const std::string& scope, const std::string& key, std::uint64_t token);

  /// Forgets every key; claims in flight become stale and their waiters start over.
  void clear();

  /// Completed keys held now.
  std::size_t size() const;
  /// Bytes of completed keys held now (keys, bodies and headers).
  std::size_t bytes() const;

private:
  struct entry {
    std::uint64_t fingerprint = 0;
    std::uint64_t token = 0;
    bool done = false;
    stored_response response;
    std::size_t bytes = 0;
  };
  void evict();

  std::size_t max_keys_;
  std::size_t max_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::unordered_map<std::string, entry> entries_;
  std::deque<std::pair<std::string, std::uint64_t>> completed_; // oldest first, with the token
  std::size_t done_count_ = 0;
  std::size_t done_bytes_ = 0;
  std::uint64_t next_token_ = 0;
};

} // namespace outboxd::simulator
