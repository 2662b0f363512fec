// Dead-letter inspection and redrive queries.
#include "persistence/dead_letter_admin.hpp"

#include "domain/revert.hpp"
#include "persistence/aggregate_hooks.hpp"
#include "persistence/rows.hpp"

#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

using namespace std::string_literals;

const std::string list_sql = "SELECT "s + dead_letter_columns +
                             " FROM dead_letter_events WHERE ($1::text IS NULL OR status = $1) "
                             "AND ($2::bigint IS NULL OR id < $2) ORDER BY id DESC LIMIT $3";
const std::string find_sql =
    "SELECT "s + dead_letter_columns + " FROM dead_letter_events WHERE id = $1";
// The newest max_timeline_attempts + 1 (the one more tells that there are more).
const std::string attempts_sql = listed_attempts_sql("dead_letter_events", "original_event_id",
                                                     domain::max_timeline_attempts + 1);
// Only a FAILED dead letter goes back: a PENDING or PROCESSING one is still being worked on,
// and a PROCESSED one is done.
const std::string redrive_sql =
    "UPDATE dead_letter_events SET status = 'PENDING', attempts = 0, next_retry_at = NULL, "
    "failing_since = NULL, failed_step = NULL, "
    "resolved_at = NULL, status_changed_at = now() WHERE id = $1 AND status = 'FAILED' "
    "RETURNING "s +
    dead_letter_columns;
// An operator's resolution of the step that failed (a revert, or the re-send that was to settle a
// step): the step the compensation recorded as failed, else (a dead letter failed before steps
// were recorded) the newest failed row the compensation itself wrote: a revert, or a settling
// re-send (of no run of the event, numbered after its attempts). Forward rows of the fan-out are
// not candidates: an old transient failure of a step that succeeded later is not what failed.
// Rows of the event the dead letter compensates: its own, or for a failed cancellation the event
// it cancels, as the engine picks it.
const std::string failing_step_sql =
    "WITH d AS (SELECT l.failed_step, CASE WHEN left(l.event_type, 1) = '!' THEN "s +
    latest_event_sql("l.aggregate_type", "l.aggregate_id", "substr(l.event_type, 2)") +
    " ELSE l.original_event_id END AS event_id FROM dead_letter_events l WHERE l.id = $1 AND "
    "l.status = 'FAILED') "
    "SELECT d.event_id, coalesce(d.failed_step, (SELECT r.destination FROM aggregate_results r "
    "WHERE r.event_id = d.event_id AND r.outcome IN ('retryable', 'non_retryable') AND "
    "(r.destination LIKE '%.revert' OR (r.lease_token IS NULL AND r.attempt > coalesce((SELECT "
    "e.attempts FROM outbox_events e WHERE e.id = d.event_id), 0))) ORDER BY r.id DESC LIMIT 1)) "
    "FROM d";
// ... is recorded as that step's revert, skipped (the compensation counts it as done), with the
// event's columns from a row of the step, or from the event itself when the step has none (a
// run cut off in the middle of its first call, a settling re-send held back) ...
const std::string settle_step_sql =
    "INSERT INTO aggregate_results (event_id, aggregate_type, aggregate_id, event_type, "
    "destination, fanout_order, attempt, endpoint_url, http_method, outcome, error_message) "
    "SELECT * FROM ((SELECT event_id, aggregate_type, aggregate_id, event_type, $3, fanout_order, "
    "attempt, endpoint_url, '-', 'skipped', $4 FROM aggregate_results WHERE event_id = $1 AND "
    "destination IN ($2, $3) ORDER BY id DESC LIMIT 1) UNION ALL (SELECT id, aggregate_type, "
    "aggregate_id, event_type, $3, 0, attempts, '-', '-', 'skipped', $4 FROM outbox_events "
    "WHERE id = $1)) AS source LIMIT 1";
// ... and the compensation goes on with the other steps.
const std::string resume_sql =
    "UPDATE dead_letter_events SET status = 'PENDING', attempts = 0, next_retry_at = NULL, "
    "failing_since = NULL, failed_step = NULL, revert_error = $2, status_changed_at = now() "
    "WHERE id = $1 AND status = 'FAILED' RETURNING "s +
    dead_letter_columns;
// Without a failed step to name: done by hand, nothing left to compensate.
const std::string resolve_sql =
    "UPDATE dead_letter_events SET status = 'PROCESSED', revert_error = $2, resolved_at = now(), "
    "next_retry_at = NULL, status_changed_at = now() WHERE id = $1 AND status = 'FAILED' "
    "RETURNING "s +
    dead_letter_columns;

} // namespace

std::vector<statement> dead_letter_admin::statements() {
  return {{"dlq_admin_list", list_sql},
          {"dlq_admin_find", find_sql},
          {"dlq_admin_attempts", attempts_sql},
          {"dlq_admin_redrive", redrive_sql},
          {"dlq_admin_failing_step", failing_step_sql},
          {"dlq_admin_settle_step", settle_step_sql},
          {"dlq_admin_resume", resume_sql},
          {"dlq_admin_resolve", resolve_sql}};
}

std::vector<domain::dead_letter_record>
dead_letter_admin::list(std::optional<std::string> status, std::optional<std::int64_t> before_id,
                        int limit) {
  return pool_.run([&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    std::vector<domain::dead_letter_record> out;
    for (const auto& r : tx.exec_prepared("dlq_admin_list", status, before_id, limit))
      out.push_back(to_dead_letter(r));
    return out;
  });
}

std::optional<std::pair<domain::dead_letter_record, std::vector<domain::attempt_record>>>
dead_letter_admin::find(std::int64_t id) {
  using found = std::pair<domain::dead_letter_record, std::vector<domain::attempt_record>>;
  return pool_.run([&](pqxx::connection& c) -> std::optional<found> {
    pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
    auto rows = tx.exec_prepared("dlq_admin_find", id);
    if (rows.empty())
      return std::nullopt;
    found out{to_dead_letter(rows[0]), {}};
    for (const auto& r : tx.exec_prepared("dlq_admin_attempts", id))
      out.second.push_back(to_attempt(r));
    return out;
  });
}

domain::redrive_outcome dead_letter_admin::redrive(std::int64_t id) {
  return change_failed(
      id, [&](pqxx::work& tx) { return tx.exec_prepared("dlq_admin_redrive", id); }, nullptr);
}

domain::redrive_outcome dead_letter_admin::resolve(std::int64_t id, const std::string& reason) {
  return change_failed(
      id,
      [&](pqxx::work& tx) {
        // The step that failed is settled by the operator; the other applied steps are still
        // reverted, by the dead-letter processor, as after a redrive.
        auto failing = tx.exec_prepared("dlq_admin_failing_step", id);
        if (!failing.empty() && !failing[0][0].is_null() && !failing[0][1].is_null()) {
          auto destination =
              std::string(domain::destination_of_step(failing[0][1].as<std::string>()));
          tx.exec_prepared("dlq_admin_settle_step", failing[0][0].as<std::int64_t>(), destination,
                           domain::revert_step(destination), reason);
          return tx.exec_prepared("dlq_admin_resume", id, reason);
        }
        return tx.exec_prepared("dlq_admin_resolve", id, reason);
      },
      [&](pqxx::work& tx, const domain::dead_letter_record& d) {
        if (d.status != "PROCESSED") // resumed: the compensation moves the order when it ends
          return;
        // A failed cancellation ends as a cancellation would have: CANCELLED; any other FAILED.
        const bool cancellation = d.event_type.rfind('!', 0) == 0;
        apply_transition(tx, hooks_of(hooks_, d.aggregate_type), d.aggregate_id,
                         cancellation ? domain::engine_outcome::cancellation_compensated
                                      : domain::engine_outcome::fanout_compensated,
                         reason);
      });
}

domain::redrive_outcome dead_letter_admin::change_failed(
    std::int64_t id, const std::function<pqxx::result(pqxx::work&)>& change,
    const std::function<void(pqxx::work&, const domain::dead_letter_record&)>& then) {
  using kind = domain::redrive_outcome::kind;
  return pool_.run([&](pqxx::connection& c) {
    pqxx::work tx(c);
    auto updated = change(tx);
    if (!updated.empty()) {
      auto d = to_dead_letter(updated[0]);
      if (then)
        then(tx, d);
      tx.commit();
      return domain::redrive_outcome{kind::redriven, std::move(d)};
    }
    auto current = tx.exec_prepared("dlq_admin_find", id);
    if (current.empty())
      return domain::redrive_outcome{kind::not_found, std::nullopt};
    return domain::redrive_outcome{kind::not_failed, to_dead_letter(current[0])};
  });
}

} // namespace outboxd::persistence
