// The consistency rules one by one. Problems are sentences for an operator reading the UI or a
// test failure, so each names the operation, the id issued and the order's status.
#include "simulator/consistency.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <unordered_map>

namespace outboxd::simulator {

using domain::audited_order;
using domain::order_status;
namespace {

/// A kind of side effect an order needs exactly once when it succeeded.
struct required_step {
  const char* what;
  std::vector<std::string> kinds;
  const char* operations; // for the message when none was applied
};

const std::vector<required_step>& required_steps() {
  static const std::vector<required_step> steps = {
      {"reservation", {"reservation"}, "inventory.reserve"},
      {"fraud check", {"fraudCheck"}, "fraudCheck.check"},
      {"shipment", {"shipment"}, "shipping.domestic.create or shipping.international.create"},
      {"payment", {"charge", "highValueProcessing"}, "billing.charge or highValue.process"}};
  return steps;
}

std::string describe(const ledger_entry& e) {
  return fmt::format("{} {}", e.operation, e.id);
}

std::string list(const std::vector<const ledger_entry*>& entries) {
  std::string out;
  for (const auto* e : entries)
    out += (out.empty() ? "" : ", ") + describe(*e);
  return out;
}

bool is_success_state(order_status s) {
  return s == order_status::confirmed || s == order_status::shipped || s == order_status::delivered;
}

bool is_compensated_state(order_status s) {
  return s == order_status::failed || s == order_status::cancelled;
}

class order_checker {
public:
  order_checker(const audited_order& o, std::vector<const ledger_entry*> entries,
                std::vector<consistency_violation>& out)
      : order_(o), status_(domain::to_string(o.status)), entries_(std::move(entries)), out_(out) {
    std::sort(entries_.begin(), entries_.end(),
              [](auto* a, auto* b) { return a->applied_seq < b->applied_seq; });
  }

  void check() {
    check_duplicates();
    if (is_success_state(order_.status))
      check_succeeded();
    else
      check_compensated();
  }

private:
  void report(std::string problem) { out_.push_back({order_.id, std::move(problem)}); }

  // Same operation (and notification type) applied under different keys: the remote side did
  // the work twice. Required steps of a successful order are reported by check_succeeded, which
  // also sees two different operations of one step (a domestic and an international shipment).
  void check_duplicates() {
    std::map<std::pair<std::string, std::string>, std::vector<const ledger_entry*>> groups;
    for (const auto* e : entries_)
      groups[{e->operation, e->notification_type.value_or("")}].push_back(e);
    for (const auto& [key, group] : groups) {
      if (group.size() < 2)
        continue;
      if (is_success_state(order_.status) && is_required_kind(group.front()->kind))
        continue;
      auto what = key.second.empty() ? key.first : fmt::format("{} ({})", key.first, key.second);
      report(fmt::format("{} was applied {} times under different idempotency keys ({}) but "
                         "must be applied once; the order is {}",
                         what, group.size(), list(group), status_));
    }
  }

  static bool is_required_kind(const std::string& kind) {
    for (const auto& step : required_steps())
      if (std::find(step.kinds.begin(), step.kinds.end(), kind) != step.kinds.end())
        return true;
    return false;
  }

  void check_succeeded() {
    for (const auto& step : required_steps()) {
      std::vector<const ledger_entry*> found;
      for (const auto* e : entries_)
        if (std::find(step.kinds.begin(), step.kinds.end(), e->kind) != step.kinds.end())
          found.push_back(e);
      if (found.empty())
        report(fmt::format("no {} was applied ({}) but the order is {}", step.what, step.operations,
                           status_));
      else if (found.size() > 1)
        report(fmt::format("{} {}s were applied ({}) but the order is {} and needs exactly one",
                           found.size(), step.what, list(found), status_));
    }
    for (const auto* e : entries_)
      if (e->reverted)
        report(fmt::format("{} was reverted but the order is {}", describe(*e), status_));
  }

  void check_compensated() {
    std::vector<const ledger_entry*> reverted;
    for (const auto* e : entries_) {
      if (!is_revertible_kind(e->kind))
        continue;
      if (!e->reverted) {
        report(fmt::format("{} is still active but the order is {}", describe(*e), status_));
        continue;
      }
      if (e->revert_requests != 1)
        report(fmt::format("{} received {} revert requests but must be reverted exactly once; "
                           "the order is {}",
                           describe(*e), e->revert_requests, status_));
      reverted.push_back(e);
    }
    // Compensation is LIFO: walking the entries in application order, each must have been
    // reverted after the next one. Adjacent pairs suffice to find any inversion.
    for (std::size_t i = 0; i + 1 < reverted.size(); ++i) {
      const auto* earlier = reverted[i];
      const auto* later = reverted[i + 1];
      if (earlier->reverted_seq.value_or(0) < later->reverted_seq.value_or(0))
        report(fmt::format("{} was reverted before {} although it was applied first; "
                           "compensation must run in reverse order of application (the order "
                           "is {})",
                           describe(*earlier), describe(*later), status_));
    }
  }

  const audited_order& order_;
  std::string status_;
  std::vector<const ledger_entry*> entries_;
  std::vector<consistency_violation>& out_;
};

} // namespace

consistency_report check_consistency(const std::vector<audited_order>& orders,
                                     const ledger_snapshot& ledger) {
  std::unordered_map<std::string, std::vector<const ledger_entry*>> by_aggregate;
  for (const auto& e : ledger.entries)
    by_aggregate[e.aggregate_id].push_back(&e);

  std::vector<const audited_order*> sorted;
  for (const auto& o : orders)
    sorted.push_back(&o);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->id < b->id; });

  consistency_report report;
  for (const auto* o : sorted) {
    bool settled = is_success_state(o->status) || is_compensated_state(o->status);
    if (!settled || o->created_at_ms < ledger.started_at_ms) {
      ++report.unchecked;
      continue;
    }
    ++report.checked;
    auto it = by_aggregate.find(std::to_string(o->id));
    order_checker(*o, it == by_aggregate.end() ? std::vector<const ledger_entry*>{} : it->second,
                  report.violations)
        .check();
  }
  return report;
}

} // namespace outboxd::simulator
