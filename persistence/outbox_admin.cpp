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

/// PostgreSQL's estimate of the rows of `table` whose `column` is `value`, from the column's most
/// common values (what ANALYZE, run by autovacuum, keeps).
std::string estimate_of(const std::string& table, const std::string& column,
                        std::string_view value) {
  return fmt::format(
      "SELECT m.f * c.reltuples FROM pg_stats s, pg_class c, "
      "unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS m(v, f) "
      "WHERE s.schemaname = current_schema() AND s.tablename = '{0}' AND s.attname = '{1}' "
      "AND c.oid = '{0}'::regclass AND m.v = '{2}'",
      table, column, value);
}

/// One row counting the rows of `table` whose `column` is `value` (and `also`) up to
/// exact_up_to, estimated beyond.
std::string capped_status(const std::string& group, const std::string& table,
                          const std::string& column, std::string_view value,
                          const std::string& also = {}) {
  return capped(group, std::string(value),
                fmt::format("SELECT 1 FROM {} WHERE {} = '{}'{}", table, column, value, also),
                estimate_of(table, column, value));
}

/// What every scrape counts: live rows exactly, through partial indexes that hold nothing else
/// (unfinished events, unresolved dead letters by status and by reason), and the history the
/// gauges show (DEAD events, resolved dead letters) up to the cap. Rows (group, key, count,
/// estimated).
std::string live_counts_sql() {
  std::string sql;
  for (const char* status : {"PENDING", "PROCESSING"})
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
  // DEAD events stay for ever, and resolved dead letters for dlq.retention: history.
  sql += capped_status("events", "outbox_events", "status", "DEAD") + " UNION ALL ";
  sql += capped_status("dlq_status", "dead_letter_events", "status", "PROCESSED");
  return sql;
}

/// The /metrics gauges: the above and the orders waiting for an operator.
std::string gauges_sql() {
  return live_counts_sql() + " UNION ALL SELECT 'orders', 'ATTENTION', count(*), false FROM orders "
                             "WHERE order_status = 'ATTENTION' AND NOT deleted";
}

/// The statistics: live rows, and history counted up to exact_up_to. Statuses with no rows are
/// left out.
std::string counts_sql() {
  std::string sql = live_counts_sql() + " UNION ALL " +
                    capped_status("events", "outbox_events", "status", "PROCESSED");
  for (auto status : domain::all_order_statuses)
    sql += " UNION ALL " + capped_status("orders", "orders", "order_status",
                                         domain::to_string(status), " AND NOT deleted");
  return "SELECT * FROM (" + sql + ") counts(grp, key, n, estimated) WHERE n > 0";
}

/// The lag (how long the oldest due event has waited for a processor) and the age of the oldest
/// undelivered event (due, or waiting out a retry or an open circuit: the first PENDING one, by
/// the partial index).
constexpr const char* lag_sql = R"sql(
SELECT (SELECT extract(epoch FROM now() - min(coalesce(next_retry_at, created_at)))::float8
          FROM outbox_events
         WHERE status = 'PENDING' AND (next_retry_at IS NULL OR next_retry_at <= now())),
       (SELECT extract(epoch FROM now() - created_at)::float8
          FROM outbox_events WHERE status = 'PENDING' ORDER BY id LIMIT 1))sql";

/// The listing's filters over `source` (a table or a window of it), newest first; `also` adds
/// conditions.
std::string events_from(const std::string& source, const std::string& also = {}) {
  return "SELECT "s + event_columns + " FROM " + source +
         " WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR event_type = $2) "
         "AND ($3::bigint IS NULL OR id < $3)" +
         also + " ORDER BY id DESC LIMIT $4";
}
/// Events by status, or all: the primary key or a status's partial index, read backwards.
const std::string events_sql = events_from("outbox_events");
/// Events of one aggregate: its index, read backwards.
const std::string aggregate_events_sql =
    events_from("outbox_events", " AND aggregate_type = $5 AND aggregate_id = $6");
/// How many events a filter by type alone looks at per page.
constexpr int type_window = 10000;
/// Events of a type: within the newest type_window before the cursor; the second statement
/// says where that window ends.
const std::string typed_events_sql = events_from(fmt::format(
    "(SELECT * FROM outbox_events WHERE ($3::bigint IS NULL OR id < $3) ORDER BY id DESC "
    "LIMIT {}) w",
    type_window));
const std::string type_window_end_sql = fmt::format(
    "SELECT min(id), count(*) FROM (SELECT id FROM outbox_events WHERE ($1::bigint IS NULL OR "
    "id < $1) ORDER BY id DESC LIMIT {}) w",
    type_window);
const std::string event_sql = "SELECT "s + event_columns + " FROM outbox_events WHERE id = $1";
// The newest max_timeline_attempts + 1 (the one more tells that there are more).
const std::string event_attempts_sql =
    listed_attempts_sql("outbox_events", "id", domain::max_timeline_attempts + 1);

} // namespace

std::vector<statement> outbox_admin::statements() {
  return {{"outbox_admin_counts", counts_sql()},
          {"outbox_admin_gauges", gauges_sql()},
          {"outbox_admin_lag", lag_sql},
          {"outbox_admin_events", events_sql},
          {"outbox_admin_aggregate_events", aggregate_events_sql},
          {"outbox_admin_typed_events", typed_events_sql},
          {"outbox_admin_type_window_end", type_window_end_sql},
          {"outbox_admin_event", event_sql},
          {"outbox_admin_event_attempts", event_attempts_sql}};
}

namespace {

/// Where a group's counts appear in the statistics' answer, for naming estimates.
const std::map<std::string, std::string> group_names = {{"events", "outbox"},
                                                        {"dlq_status", "deadLetters.byStatus"},
                                                        {"dlq_reason", "deadLetters.byReason"},
                                                        {"orders", "orders"}};

domain::outbox_stats read_stats(pqxx::connection& c, const char* counts_statement,
                                bool scrape = false) {
  pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
  // A scrape behind a user's lock (an ALTER TABLE, say) gives up within a second, and the scrape
  // goes out without these gauges, rather than running into the scraper's own timeout.
  if (scrape)
    tx.exec("SELECT set_config('lock_timeout', CASE WHEN setting::bigint BETWEEN 1 AND 1000 THEN "
            "setting ELSE '1000' END, true) FROM pg_settings WHERE name = 'lock_timeout'");
  // Every count has its partial index; a sequential scan (which statistics taken while a table was
  // small can make look cheaper) would read the history the caps are there to avoid.
  tx.exec("SET LOCAL enable_seqscan = off");
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
  auto lag = tx.exec_prepared1("outbox_admin_lag");
  s.oldest_due_age_seconds = optional_field<double>(lag[0]);
  s.oldest_pending_age_seconds = optional_field<double>(lag[1]);
  return s;
}

} // namespace

domain::outbox_stats outbox_admin::stats() {
  return pool_.run([](pqxx::connection& c) { return read_stats(c, "outbox_admin_counts"); });
}

domain::outbox_stats outbox_admin::gauges() {
  return pool_.run([](pqxx::connection& c) { return read_stats(c, "outbox_admin_gauges", true); });
}

domain::event_page outbox_admin::events(const domain::event_filter& f) {
  return pool_.run([&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    const bool by_type_alone = f.event_type && !f.status && !f.aggregate_id;
    auto rows =
        f.aggregate_id ? tx.exec_prepared("outbox_admin_aggregate_events", f.status, f.event_type,
                                          f.before_id, f.limit, f.aggregate_type, *f.aggregate_id)
        : by_type_alone
            ? tx.exec_prepared("outbox_admin_typed_events", f.status, f.event_type, f.before_id,
                               f.limit)
            : tx.exec_prepared("outbox_admin_events", f.status, f.event_type, f.before_id, f.limit);
    domain::event_page page;
    for (const auto& r : rows)
      page.rows.push_back(to_event(r));
    if (static_cast<int>(page.rows.size()) == f.limit) {
      page.next_cursor = page.rows.back().id;
    } else if (by_type_alone) {
      // A short page of a full window: older events are left to look at.
      auto end = tx.exec_prepared1("outbox_admin_type_window_end", f.before_id);
      if (end[1].as<long long>() == type_window)
        page.next_cursor = end[0].as<std::int64_t>();
    }
    return page;
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
