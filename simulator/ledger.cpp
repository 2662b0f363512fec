// Ledger bookkeeping: ids, sequence numbers and the clock; the JSON is ledger_entry.cpp's.
#include "simulator/ledger.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fmt/format.h>
#include <malloc.h>

namespace outboxd::simulator {
namespace {

// Never reset, so that ids stay unique across ledger resets too.
std::atomic<std::uint64_t> serial{0};

/// What an entry holds, roughly: its strings and its place in the containers.
std::size_t size_of(const ledger_entry& e) {
  return sizeof(ledger_entry) + 64 + 2 * e.id.size() + e.aggregate_id.size() + e.operation.size() +
         e.kind.size() + e.notification_type.value_or("").size() +
         e.idempotency_key.value_or("").size();
}

} // namespace

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

side_effect_ledger::side_effect_ledger(std::size_t max_entries, std::size_t max_bytes)
    : max_entries_(std::max<std::size_t>(1, max_entries)), max_bytes_(max_bytes),
      started_at_ms_(now_ms()) {}

std::string side_effect_ledger::make_id(std::string_view prefix, std::string_view middle) {
  return fmt::format("{}-{}-{}-{}", prefix, middle, now_ms(), ++serial);
}

ledger_entry side_effect_ledger::apply(const side_effect& effect) {
  ledger_entry e;
  e.aggregate_id = effect.aggregate_id;
  e.operation = effect.operation;
  e.kind = effect.kind;
  e.notification_type = effect.notification_type;
  e.idempotency_key = effect.idempotency_key;
  std::lock_guard lock(mutex_);
  e.applied_at_ms = now_ms();
  e.id =
      fmt::format("{}-{}-{}-{}", effect.id_prefix, effect.aggregate_id, e.applied_at_ms, ++serial);
  e.applied_seq = ++seq_;
  by_id_.emplace(e.id, forgotten_ + entries_.size());
  bytes_ += size_of(e);
  entries_.push_back(e);
  forget_oldest();
  return e;
}

void side_effect_ledger::forget_oldest() {
  while (entries_.size() > 1 && (entries_.size() > max_entries_ || bytes_ > max_bytes_)) {
    const auto& oldest = entries_.front();
    // Orders created up to the forgotten entry's moment may have had it: unchecked from now on.
    started_at_ms_ = std::max(started_at_ms_, oldest.applied_at_ms + 1);
    bytes_ -= size_of(oldest);
    by_id_.erase(oldest.id);
    entries_.pop_front();
    ++forgotten_;
  }
}

revert_result side_effect_ledger::revert_entry(ledger_entry& e) {
  ++e.revert_requests;
  if (e.reverted)
    return {revert_result::kind::already_reverted, e};
  e.reverted = true;
  e.reverted_at_ms = now_ms();
  e.reverted_seq = ++seq_;
  return {revert_result::kind::reverted, e};
}

revert_result side_effect_ledger::revert(std::string_view forward_operation, std::string_view id) {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(std::string(id));
  if (it == by_id_.end())
    return {};
  auto& e = entries_[it->second - forgotten_];
  if (e.operation != forward_operation)
    return {};
  return revert_entry(e);
}

revert_result side_effect_ledger::revert_latest(std::string_view forward_operation,
                                                std::string_view aggregate_id) {
  std::lock_guard lock(mutex_);
  for (auto e = entries_.rbegin(); e != entries_.rend(); ++e)
    if (!e->reverted && e->operation == forward_operation && e->aggregate_id == aggregate_id)
      return revert_entry(*e);
  return {};
}

std::string side_effect_ledger::json(const std::optional<std::string>& aggregate_id) const {
  return ledger_json(snapshot(), aggregate_id);
}

ledger_snapshot side_effect_ledger::snapshot() const {
  std::lock_guard lock(mutex_);
  return {started_at_ms_, {entries_.begin(), entries_.end()}};
}

void side_effect_ledger::reset() {
  std::lock_guard lock(mutex_);
  std::deque<ledger_entry>().swap(entries_);
  std::unordered_map<std::string, std::size_t>().swap(by_id_);
  forgotten_ = 0;
  bytes_ = 0;
  seq_ = 0;
  started_at_ms_ = now_ms();
  ::malloc_trim(0); // freed memory is otherwise kept by the allocator, and RSS stays where it was
}

std::int64_t side_effect_ledger::started_at_ms() const {
  std::lock_guard lock(mutex_);
  return started_at_ms_;
}

std::size_t side_effect_ledger::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::vector<ledger_entry> side_effect_ledger::entries() const {
  std::lock_guard lock(mutex_);
  return {entries_.begin(), entries_.end()};
}

} // namespace outboxd::simulator
