// Ledger bookkeeping and its JSON.
#include "http/simulator_ledger.hpp"

#include "http/json.hpp"

#include <atomic>
#include <chrono>
#include <ctime>
#include <fmt/format.h>
#include <map>

namespace outboxd::http {
namespace {

// Never reset, so that ids stay unique across ledger resets too.
std::atomic<std::uint64_t> serial{0};

bool revertible(const std::string& kind) {
  return kind == "reservation" || kind == "shipment" || kind == "charge" ||
         kind == "highValueProcessing";
}

void write_optional_ms(json_writer& w, std::string_view iso_key, std::string_view ms_key,
                       const std::optional<std::int64_t>& ms) {
  w.key(iso_key);
  if (ms)
    w.value(iso_time(*ms));
  else
    w.null();
  w.field(ms_key, ms);
}

void write_entry(json_writer& w, const ledger_entry& e) {
  w.start_object();
  w.field("id", e.id);
  w.field("aggregateId", e.aggregate_id);
  w.field("operation", e.operation);
  w.field("kind", e.kind);
  w.field("notificationType", e.notification_type);
  w.field("idempotencyKey", e.idempotency_key);
  w.field("revertible", revertible(e.kind));
  w.field("applied", 1);
  w.field("revertRequests", e.revert_requests);
  w.field("state", e.reverted ? "reverted" : "active");
  w.field("appliedAt", iso_time(e.applied_at_ms));
  w.field("appliedAtMs", e.applied_at_ms);
  w.field("appliedSeq", e.applied_seq);
  write_optional_ms(w, "revertedAt", "revertedAtMs", e.reverted_at_ms);
  w.field("revertedSeq", e.reverted_seq);
  w.end_object();
}

} // namespace

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string iso_time(std::int64_t ms) {
  auto seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
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
  std::lock_guard lock(mutex_);
  json_writer w;
  w.start_object();
  w.field("startedAt", iso_time(started_at_ms_));
  w.field("startedAtMs", started_at_ms_);
  w.key("entries");
  w.start_array();
  // (aggregate, operation, notification type) -> entry indexes, for the duplicates section.
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    if (aggregate_id && e.aggregate_id != *aggregate_id)
      continue;
    write_entry(w, e);
    groups[{e.aggregate_id, e.operation, e.notification_type.value_or("")}].push_back(i);
  }
  w.end_array();
  w.key("duplicates");
  w.start_array();
  for (const auto& [key, indexes] : groups) {
    if (indexes.size() < 2)
      continue;
    const auto& first = entries_[indexes.front()];
    w.start_object();
    w.field("aggregateId", first.aggregate_id);
    w.field("operation", first.operation);
    w.field("notificationType", first.notification_type);
    w.field("count", static_cast<int>(indexes.size()));
    w.key("ids");
    w.start_array();
    for (auto i : indexes)
      w.value(entries_[i].id);
    w.end_array();
    w.key("idempotencyKeys");
    w.start_array();
    for (auto i : indexes) {
      if (entries_[i].idempotency_key)
        w.value(*entries_[i].idempotency_key);
      else
        w.null();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.str();
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

} // namespace outboxd::http
