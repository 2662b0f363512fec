// Claims, replays and FIFO eviction of Idempotency-Keys.
#include "simulator/idempotency.hpp"

namespace outboxd::simulator {
namespace {

std::string map_key(const std::string& scope, const std::string& key) {
  // Keys are printable ASCII (checked by the caller), so a newline cannot appear in either part.
  return scope + '\n' + key;
}

std::size_t size_of(const std::string& key, const stored_response& r) {
  constexpr std::size_t overhead = 96; // map node, deque slot, bookkeeping
  std::size_t n = overhead + 2 * key.size() + r.body.size();
  for (const auto& [name, value] : r.headers)
    n += name.size() + value.size();
  return n;
}

} // namespace

idempotency_store::idempotency_store(std::size_t max_keys, std::size_t max_bytes)
    : max_keys_(max_keys), max_bytes_(max_bytes) {}

idempotency_claim idempotency_store::begin(const std::string& scope, const std::string& key,
                                           std::uint64_t fingerprint, bool wait) {
  auto k = map_key(scope, key);
  std::unique_lock lock(mutex_);
  for (;;) {
    auto it = entries_.find(k);
    if (it == entries_.end()) {
      auto token = ++next_token_;
      entries_.emplace(k, entry{fingerprint, token, false, {}, 0});
      return {idempotency_claim::kind::owner, {}, token};
    }
    if (it->second.fingerprint != fingerprint)
      return {idempotency_claim::kind::conflict, {}, 0};
    if (it->second.done)
      return {idempotency_claim::kind::replay, it->second.response, 0};
    if (!wait)
      return {idempotency_claim::kind::in_flight, {}, 0};
    auto waited = it->second.token;
    changed_.wait(lock, [&] {
      auto now = entries_.find(k);
      return now == entries_.end() || now->second.done || now->second.token != waited;
    });
  }
}

void idempotency_store::complete(const std::string& scope, const std::string& key,
                                 std::uint64_t token, stored_response response) {
  auto k = map_key(scope, key);
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(k);
    if (it == entries_.end() || it->second.token != token || it->second.done)
      return;
    it->second.done = true;
    it->second.bytes = size_of(k, response);
    it->second.response = std::move(response);
    ++done_count_;
    done_bytes_ += it->second.bytes;
    completed_.emplace_back(k, token);
    evict();
  }
  changed_.notify_all();
}

void idempotency_store::abandon(const std::string& scope, const std::string& key,
                                std::uint64_t token) {
  auto k = map_key(scope, key);
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(k);
    if (it == entries_.end() || it->second.token != token || it->second.done)
      return;
    entries_.erase(it);
  }
  changed_.notify_all();
}

void idempotency_store::evict() {
  while ((done_count_ > max_keys_ || done_bytes_ > max_bytes_) && !completed_.empty()) {
    auto [k, token] = std::move(completed_.front());
    completed_.pop_front();
    auto it = entries_.find(k);
    if (it == entries_.end() || it->second.token != token)
      continue;
    --done_count_;
    done_bytes_ -= it->second.bytes;
    entries_.erase(it);
  }
}

void idempotency_store::clear() {
  {
    std::lock_guard lock(mutex_);
    entries_.clear();
    completed_.clear();
    done_count_ = 0;
    done_bytes_ = 0;
  }
  changed_.notify_all();
}

std::size_t idempotency_store::size() const {
  std::lock_guard lock(mutex_);
  return done_count_;
}

std::size_t idempotency_store::bytes() const {
  std::lock_guard lock(mutex_);
  return done_bytes_;
}

} // namespace outboxd::simulator
