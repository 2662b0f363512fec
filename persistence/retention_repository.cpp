// Audit rows are walked in id order from a cursor the caller keeps, so a batch reads what it
// deletes plus the rows it must keep, never the whole history; removed orders are found through
// their own partial index.
#include "persistence/retention_repository.hpp"

#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

/// The audit window: the next $3 rows after id $1 up to the first younger than $2 ms, each with
/// whether it may go. Each aggregate of the window is probed once, through its indexes: scalar
/// subqueries (LIMIT 1, apart from the window by OFFSET 0) that the planner can neither hash over
/// a whole table nor turn into a join that reads one.
constexpr const char* audit_scan_sql = R"sql(
WITH w AS (
  SELECT id, aggregate_type, aggregate_id, published_at FROM aggregate_results
   WHERE id > $1 ORDER BY id LIMIT $3),
edge AS (
  SELECT min(id) AS id FROM w WHERE published_at >= now() - $2::bigint * interval '1 millisecond'),
old AS (SELECT w.id, w.aggregate_type, w.aggregate_id FROM w, edge
         WHERE edge.id IS NULL OR w.id < edge.id),
settled AS MATERIALIZED (
  SELECT a.aggregate_type, a.aggregate_id, p.ok
    FROM (SELECT DISTINCT aggregate_type, aggregate_id FROM old) a,
         LATERAL (SELECT
           (SELECT 1 FROM outbox_events e WHERE e.aggregate_type = a.aggregate_type
               AND e.aggregate_id = a.aggregate_id AND e.status IN ('PENDING', 'PROCESSING')
             LIMIT 1) IS NULL
           AND (SELECT 1 FROM dead_letter_events d WHERE d.aggregate_id = a.aggregate_id
               AND d.aggregate_type = a.aggregate_type AND d.status <> 'PROCESSED' LIMIT 1) IS NULL
           AND ({settled}) AS ok OFFSET 0) p)
SELECT old.id, settled.ok FROM old JOIN settled USING (aggregate_type, aggregate_id)
 ORDER BY old.id)sql";

constexpr const char* audit_delete_sql =
    "DELETE FROM aggregate_results WHERE id = ANY($1::bigint[]) RETURNING id";
constexpr const char* audit_delete_exported_sql =
    "DELETE FROM aggregate_results r WHERE id = ANY($1::bigint[]) RETURNING id, "
    "to_char(published_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), row_to_json(r)::text";

constexpr const char* removed_orders_sql = R"sql(
DELETE FROM orders WHERE id IN (
  SELECT o.id FROM orders o
   WHERE o.deleted AND o.updated_at < now() - $1::bigint * interval '1 millisecond'
     AND NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.aggregate_type = 'order'
                        AND e.aggregate_id = o.id::text AND e.status IN ('PENDING', 'PROCESSING'))
     AND NOT EXISTS (SELECT 1 FROM dead_letter_events d WHERE d.aggregate_id = o.id::text
                        AND d.aggregate_type = 'order' AND d.status <> 'PROCESSED')
   ORDER BY o.updated_at LIMIT $2))sql";

/// The settled condition of aggregate a: its type's hooks decide; a type without hooks is
/// settled once nothing of it is unfinished.
std::string settled_sql(pqxx::connection& conn, const hooks_by_type& hooks) {
  std::string cases;
  for (const auto& [type, h] : hooks)
    if (h)
      cases += fmt::format(" WHEN {} THEN {}", conn.quote(type), h->settled_sql("a.aggregate_id"));
  return cases.empty() ? "true" : fmt::format("CASE a.aggregate_type{} ELSE true END", cases);
}

/// Retention's probes have an index each; statistics taken while a table was small (or before a
/// burst filled it) can make a sequential scan per probe look cheaper, and a batch then reads a
/// whole table a thousand times. This transaction's statements take the indexes whatever the
/// statistics say.
void prefer_indexes(pqxx::work& tx) {
  tx.exec("SET LOCAL enable_seqscan = off");
}

} // namespace

retention_repository::retention_repository(pqxx::connection& conn, hooks_by_type hooks)
    : conn_(conn), hooks_(std::move(hooks)) {
  conn_.prepare("retention_audit_delete", audit_delete_sql);
  conn_.prepare("retention_audit_delete_exported", audit_delete_exported_sql);
  conn_.prepare("retention_removed_orders", removed_orders_sql);
}

audit_batch retention_repository::delete_settled_audit(
    std::int64_t after, std::chrono::milliseconds age, int batch,
    const std::function<void(const std::vector<expiring_audit_row>&)>& keep) {
  if (!audit_prepared_) { // on first use: the hooks' SQL is theirs to get right, not start-up's
    conn_.prepare("retention_audit_scan",
                  fmt::format(audit_scan_sql, fmt::arg("settled", settled_sql(conn_, hooks_))));
    audit_prepared_ = true;
  }
  pqxx::work tx(conn_);
  prefer_indexes(tx);
  audit_batch out;
  out.scanned_to = after;
  std::string doomed;
  auto rows =
      tx.exec_prepared("retention_audit_scan", after, static_cast<long long>(age.count()), batch);
  for (const auto& r : rows) {
    out.scanned_to = r[0].as<std::int64_t>();
    if (r[1].as<bool>())
      doomed += (doomed.empty() ? "" : ",") + r[0].as<std::string>();
  }
  out.caught_up = rows.size() < static_cast<std::size_t>(batch);
  if (!doomed.empty()) {
    auto deleted = tx.exec_prepared(
        keep ? "retention_audit_delete_exported" : "retention_audit_delete", "{" + doomed + "}");
    out.deleted = static_cast<int>(deleted.size());
    if (keep) {
      std::vector<expiring_audit_row> expiring;
      expiring.reserve(deleted.size());
      for (const auto& r : deleted)
        expiring.push_back(
            {r[0].as<std::int64_t>(), r[1].as<std::string>(), r[2].as<std::string>()});
      keep(expiring);
    }
  }
  tx.commit();
  return out;
}

int retention_repository::delete_removed_orders(std::chrono::milliseconds age, int batch) {
  pqxx::work tx(conn_);
  prefer_indexes(tx);
  auto r = tx.exec_prepared("retention_removed_orders", static_cast<long long>(age.count()), batch);
  tx.commit();
  return static_cast<int>(r.affected_rows());
}

} // namespace outboxd::persistence
