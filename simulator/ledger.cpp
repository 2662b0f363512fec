// Ledger bookkeeping: ids, sequence numbers and the clock; the JSON is ledger_entry.cpp's.
#include "simulator/ledger.hpp"

#include <atomic>
#include <chrono>
#include <fmt/format.h>

namespace outboxd::simulator {
namespace {

// Never reset, so that ids stay unique across ledger resets too.
std::atomic<std::uint64_t> serial{0};

} // namespace

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

side_effect_ledger::side_effect_ledger() : started_at_ms_(now_ms()) {}

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
  by_id_.emplace(e.id, entries_.size());
  entries_.push_back(e);
  return e;
}

revert_result side_effect_ledger::revert_entry(std::size_t index) {
  auto& e = entries_[index];
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
  if (it == by_id_.end() || entries_[it->second].operation != forward_operation)
    return {};
  return revert_entry(it->second);
}

revert_result side_effect_ledger::revert_latest(std::string_view forward_operation,
                                                std::string_view aggregate_id) {
  std::lock_guard lock(mutex_);
  for (auto i = entries_.size(); i-- > 0;) {
    const auto& e = entries_[i];
    if (!e.reverted && e.operation == forward_operation && e.aggregate_id == aggregate_id)
      return revert_entry(i);
  }
  return {};
}

std::string side_effect_ledger::json(const std::optional<std::string>& aggregate_id) const {
  return ledger_json(snapshot(), aggregate_id);
}

ledger_snapshot side_effect_ledger::snapshot() const {
  std::lock_guard lock(mutex_);
  return {started_at_ms_, entries_};
}

void side_effect_ledger::reset() {
  std::lock_guard lock(mutex_);
  entries_.clear();
  by_id_.clear();
  seq_ = 0;
  started_at_ms_ = now_ms();
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
  return entries_;
}

} // namespace outboxd::simulator
