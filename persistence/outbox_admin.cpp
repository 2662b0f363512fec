// Inspection queries. Counts group by status; the lag reads the oldest due PENDING row through
// the partial index of due events.
#include "persistence/outbox_admin.hpp"

#include "persistence/rows.hpp"

namespace outboxd::persistence {
namespace {

using namespace std::string_literals;

constexpr const char* counts_sql = R"sql(
SELECT 'events', status, count(*) FROM outbox_events GROUP BY status
UNION ALL SELECT 'dlq_status', status, count(*) FROM dead_letter_events GROUP BY status
UNION ALL SELECT 'dlq_reason', reason, count(*) FROM dead_letter_events GROUP BY reason
UNION ALL SELECT 'orders', order_status, count(*) FROM orders WHERE NOT deleted GROUP BY order_status)sql";

// Each unfinished status is counted through its own partial index (never the PROCESSED history).
constexpr const char* gauges_sql = R"sql(
SELECT 'events', 'PENDING', count(*) FROM outbox_events WHERE status = 'PENDING'
UNION ALL SELECT 'events', 'PROCESSING', count(*) FROM outbox_events WHERE status = 'PROCESSING'
UNION ALL SELECT 'events', 'DEAD', count(*) FROM outbox_events WHERE status = 'DEAD'
UNION ALL SELECT 'dlq_status', status, count(*) FROM dead_letter_events GROUP BY status
UNION ALL SELECT 'dlq_reason', reason, count(*) FROM dead_letter_events GROUP BY reason
UNION ALL SELECT 'orders', 'ATTENTION', count(*) FROM orders
           WHERE order_status = 'ATTENTION' AND NOT deleted)sql";

constexpr const char* lag_sql = R"sql(
SELECT extract(epoch FROM now() - min(coalesce(next_retry_at, created_at)))::float8
  FROM outbox_events
 WHERE status = 'PENDING' AND (next_retry_at IS NULL OR next_retry_at <= now()))sql";

const std::string events_sql = "SELECT "s + event_columns +
                               " FROM outbox_events WHERE ($1::text IS NULL OR status = $1) "
                               "AND ($2::text IS NULL OR aggregate_id = $2) "
                               "AND ($3::text IS NULL OR event_type = $3) "
                               "AND ($4::bigint IS NULL OR id < $4) ORDER BY id DESC LIMIT $5";
const std::string event_sql = "SELECT "s + event_columns + " FROM outbox_events WHERE id = $1";
const std::string event_attempts_sql =
    "SELECT "s + attempt_columns + " FROM aggregate_results WHERE event_id = $1 ORDER BY id";

} // namespace

std::vector<statement> outbox_admin::statements() {
  return {{"outbox_admin_counts", counts_sql}, {"outbox_admin_gauges", gauges_sql},
          {"outbox_admin_lag", lag_sql},       {"outbox_admin_events", events_sql},
          {"outbox_admin_event", event_sql},   {"outbox_admin_event_attempts", event_attempts_sql}};
}

namespace {

domain::outbox_stats read_stats(pqxx::connection& c, const char* counts_statement) {
  pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
  domain::outbox_stats s;
  for (const auto& r : tx.exec_prepared(counts_statement)) {
    auto group = r[0].as<std::string>();
    auto& target = group == "events"       ? s.events
                   : group == "dlq_status" ? s.dead_letters_by_status
                   : group == "dlq_reason" ? s.dead_letters_by_reason
                                           : s.orders;
    target[r[1].as<std::string>()] = r[2].as<long long>();
  }
  s.oldest_due_age_seconds = optional_field<double>(tx.exec_prepared1("outbox_admin_lag")[0]);
  return s;
}

} // namespace

domain::outbox_stats outbox_admin::stats() {
  return pool_.run([](pqxx::connection& c) { return read_stats(c, "outbox_admin_counts"); });
}

domain::outbox_stats outbox_admin::gauges() {
  return pool_.run([](pqxx::connection& c) { return read_stats(c, "outbox_admin_gauges"); });
}

std::vector<domain::event_record> outbox_admin::events(const domain::event_filter& f) {
  return pool_.run([&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    std::vector<domain::event_record> out;
    for (const auto& r : tx.exec_prepared("outbox_admin_events", f.status, f.aggregate_id,
                                          f.event_type, f.before_id, f.limit))
      out.push_back(to_event(r));
    return out;
  });
}

std::optional<std::pair<domain::event_record, std::vector<domain::attempt_record>>>
outbox_admin::event(std::int64_t id) {
  using found = std::pair<domain::event_record, std::vector<domain::attempt_record>>;
  return pool_.run([&](pqxx::connection& c) -> std::optional<found> {
    pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
    auto rows = tx.exec_prepared("outbox_admin_event", id);
    if (rows.empty())
      return std::nullopt;
    found out{to_event(rows[0]), {}};
    for (const auto& r : tx.exec_prepared("outbox_admin_event_attempts", id))
      out.second.push_back(to_attempt(r));
    return out;
  });
}

} // namespace outboxd::persistence
