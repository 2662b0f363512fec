// Inspection queries. Their cost does not grow with history: live rows are counted through
// partial indexes that hold only them, history is counted up to a cap and estimated beyond it,
// and the lag reads the oldest due PENDING row through the partial index of due events.
#include "persistence/outbox_admin.hpp"

#include "persistence/rows.hpp"

#include <fmt/format.h>
#include <map>

namespace outboxd::persistence {
namespace {

using namespace std::string_literals;

/// Counts of history (processed events, resolved dead letters, orders by status) stop at this:
/// above it the figure is PostgreSQL's estimate, and is marked so.
constexpr long long exact_up_to = 10000;

/// One row (group, key, count, estimated) counting the rows of `rows_sql` (a SELECT) up to
/// exact_up_to, and `estimate_sql` (a number) beyond.
std::string capped(const std::string& group, const std::string& key, const std::string& rows_sql,
                   const std::string& estimate_sql) {
  return fmt::format("SELECT '{0}', '{1}', CASE WHEN n <= {2} THEN n "
                     "ELSE greatest({2} + 1, coalesce(({3})::bigint, 0)) END, n > {2} "
                     "FROM (SELECT count(*) AS n FROM ({4} LIMIT {2} + 1) r) c",
                     group, key, exact_up_to, estimate_sql, rows_sql);
}

/// PostgreSQL's estimate of a table's rows, from its last vacuum or analyze.
std::string table_estimate(const std::string& table) {
  return fmt::format("SELECT reltuples FROM pg_class WHERE oid = '{}'::regclass", table);
}

/// PostgreSQL's estimate of the orders in `status`, from the column's most common values.
std::string orders_estimate(std::string_view status) {
  return fmt::format("SELECT m.f * c.reltuples FROM pg_stats s, pg_class c, "
                     "unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS m(v, f) "
                     "WHERE s.schemaname = current_schema() AND s.tablename = 'orders' "
                     "AND s.attname = 'order_status' AND c.oid = 'orders'::regclass AND m.v = '{}'",
                     status);
}

/// Live rows, counted exactly through partial indexes that hold nothing else: unfinished
/// events, DEAD ones, unresolved dead letters by status and by reason, orders waiting for an
/// operator. Rows (group, key, count, estimated).
std::string live_counts_sql() {
  std::string sql;
  for (const char* status : {"PENDING", "PROCESSING", "DEAD"})
    sql += fmt::format("SELECT 'events', '{0}', count(*), false FROM outbox_events "
                       "WHERE status = '{0}' UNION ALL ",
                       status);
  // Unresolved dead letters, each status through its own partial index (due, leases, failed).
  std::string unresolved;
  for (const char* status : {"PENDING", "PROCESSING", "FAILED"}) {
    sql += fmt::format("SELECT 'dlq_status', '{0}', count(*), false FROM dead_letter_events "
                       "WHERE status = '{0}' UNION ALL ",
                       status);
    unresolved += fmt::format("{}SELECT reason FROM dead_letter_events WHERE status = '{}'",
                              unresolved.empty() ? "" : " UNION ALL ", status);
  }
  sql += "SELECT 'dlq_reason', reason, count(*), false FROM (" + unresolved +
         ") u GROUP BY reason UNION ALL ";
  sql += capped("dlq_status", "PROCESSED",
                "SELECT 1 FROM dead_letter_events WHERE status = 'PROCESSED'",
                table_estimate("dead_letter_events"));
  return sql;
}

/// The /metrics gauges: live rows only.
std::string gauges_sql() {
  return live_counts_sql() + " UNION ALL SELECT 'orders', 'ATTENTION', count(*), false FROM orders "
                             "WHERE order_status = 'ATTENTION' AND NOT deleted";
}

/// The statistics: live rows, and history counted up to exact_up_to. Statuses with no rows are
/// left out.
std::string counts_sql() {
  std::string sql =
      live_counts_sql() + " UNION ALL " +
      capped("events", "PROCESSED", "SELECT 1 FROM outbox_events WHERE status = 'PROCESSED'",
             table_estimate("outbox_events"));
  for (auto status : domain::all_order_statuses) {
    auto name = domain::to_string(status);
    sql +=
        " UNION ALL " +
        capped("orders", std::string(name),
               fmt::format("SELECT 1 FROM orders WHERE order_status = '{}' AND NOT deleted", name),
               orders_estimate(name));
  }
  return "SELECT * FROM (" + sql + ") counts(grp, key, n, estimated) WHERE n > 0";
}

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
  return {
      {"outbox_admin_counts", counts_sql()}, {"outbox_admin_gauges", gauges_sql()},
      {"outbox_admin_lag", lag_sql},         {"outbox_admin_events", events_sql},
      {"outbox_admin_event", event_sql},     {"outbox_admin_event_attempts", event_attempts_sql}};
}

namespace {

/// Where a group's counts appear in the statistics' answer, for naming estimates.
const std::map<std::string, std::string> group_names = {{"events", "outbox"},
                                                        {"dlq_status", "deadLetters.byStatus"},
                                                        {"dlq_reason", "deadLetters.byReason"},
                                                        {"orders", "orders"}};

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
    if (r[3].as<bool>())
      s.estimated.push_back(fmt::format("{}.{}", group_names.at(group), r[1].as<std::string>()));
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
