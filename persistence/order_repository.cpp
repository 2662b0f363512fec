// Order intake and inspection queries. The state machine decides inside the transaction, on the
// row locked FOR UPDATE, so concurrent commands on one order serialise.
#include "persistence/order_repository.hpp"

#include "persistence/rows.hpp"

#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

using namespace std::string_literals;

const std::string insert_order = "INSERT INTO orders (customer_id, total_amount, currency, "
                                 "shipping_type, request_key, request_hash) "
                                 "VALUES ($1, $2::numeric, $3, $4, $5, $6) "
                                 "ON CONFLICT (request_key) DO NOTHING RETURNING "s +
                                 order_columns;
const std::string order_by_request_key =
    "SELECT "s + order_columns + ", request_hash FROM orders WHERE request_key = $1";
const std::string insert_event =
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
    "idempotency_key) VALUES ($1, $2, $3, $4::jsonb, $5) RETURNING id";
const std::string lock_order =
    "SELECT "s + order_columns + " FROM orders WHERE id = $1 AND NOT deleted FOR UPDATE";
const std::string set_status = "UPDATE orders SET order_status = $2, updated_at = now() "
                               "WHERE id = $1 RETURNING "s +
                               order_columns;
const std::string set_cancelling =
    "UPDATE orders SET order_status = 'CANCELLING', status_reason = $2, updated_at = now() "
    "WHERE id = $1 RETURNING "s +
    order_columns;
const std::string mark_deleted = "UPDATE orders SET deleted = true, updated_at = now() "
                                 "WHERE id = $1 RETURNING "s +
                                 order_columns;
const std::string list_orders = "SELECT "s + order_columns +
                                " FROM orders WHERE NOT deleted "
                                "AND ($1::text IS NULL OR order_status = $1) "
                                "AND ($2::bigint IS NULL OR id < $2) "
                                "ORDER BY id DESC LIMIT $3";
const std::string find_order =
    "SELECT "s + order_columns + " FROM orders WHERE id = $1 AND NOT deleted";
const std::string events_of_order =
    "SELECT "s + event_columns +
    " FROM outbox_events WHERE aggregate_type = 'order' AND aggregate_id = $1 ORDER BY id";
const std::string attempts_of_order =
    "SELECT "s + attempt_columns +
    " FROM aggregate_results WHERE aggregate_id = $1 AND aggregate_type = 'order' ORDER BY id";
const std::string dead_letters_of_order = "SELECT "s + dead_letter_columns +
                                          " FROM dead_letter_events WHERE aggregate_id = $1 "
                                          "AND aggregate_type = 'order' ORDER BY id";

/// Inserts the event; returns its id.
std::int64_t insert_draft(pqxx::work& tx, const domain::event_draft& e) {
  return tx
      .exec_prepared1("insert_event", e.aggregate_type, e.aggregate_id, e.event_type,
                      e.payloads_json, e.idempotency_key)[0]
      .as<std::int64_t>();
}

} // namespace

std::vector<statement> order_repository::statements() {
  return {{"insert_order", insert_order},
          {"order_by_request_key", order_by_request_key},
          {"insert_event", insert_event},
          {"lock_order", lock_order},
          {"set_status", set_status},
          {"set_cancelling", set_cancelling},
          {"mark_deleted", mark_deleted},
          {"list_orders", list_orders},
          {"find_order", find_order},
          {"events_of_order", events_of_order},
          {"attempts_of_order", attempts_of_order},
          {"dead_letters_of_order", dead_letters_of_order}};
}

domain::create_outcome order_repository::create(const domain::new_order& request,
                                                const std::optional<std::string>& request_key) {
  auto hash = domain::fingerprint(request);
  return pool_.run([&](pqxx::connection& c) {
    pqxx::work tx(c);
    auto key = request_key ? request_key->c_str() : nullptr;
    auto inserted = tx.exec_prepared(
        "insert_order", request.customer_id, domain::to_decimal(request.total_amount),
        request.currency, std::string(domain::to_string(request.shipping)), key,
        request_key ? std::optional<std::int64_t>(hash) : std::nullopt);
    if (inserted.empty()) {
      // The key was used before (possibly by a transaction that committed while we waited).
      auto existing = tx.exec_prepared1("order_by_request_key", *request_key);
      tx.commit();
      bool same = !existing[9].is_null() && existing[9].as<std::int64_t>() == hash;
      auto o = to_order(existing);
      return domain::create_outcome{same ? domain::create_outcome::kind::replayed
                                         : domain::create_outcome::kind::key_reused,
                                    std::move(o)};
    }
    auto o = to_order(inserted[0]);
    auto event_id = insert_draft(tx, domain::order_created_event(o, request.items));
    tx.commit();
    announce(event_id);
    return domain::create_outcome{domain::create_outcome::kind::created, std::move(o)};
  });
}

domain::command_outcome order_repository::execute(std::int64_t order_id,
                                                  domain::order_command command,
                                                  const std::string& reason) {
  using kind = domain::command_outcome::kind;
  return pool_.run([&](pqxx::connection& c) {
    pqxx::work tx(c);
    auto locked = tx.exec_prepared("lock_order", order_id);
    if (locked.empty())
      return domain::command_outcome{kind::not_found, std::nullopt, {}};
    auto current = to_order(locked[0]);
    auto d = domain::decide(current.status, command);
    if (d.what == domain::decision::kind::conflict)
      return domain::command_outcome{kind::conflict, current, d.reason};
    if (d.what == domain::decision::kind::already_done)
      return domain::command_outcome{kind::already_done, current, {}};
    domain::order updated;
    std::int64_t event_id = 0;
    switch (command) {
    case domain::order_command::ship:
    case domain::order_command::deliver:
      updated = to_order(
          tx.exec_prepared1("set_status", order_id, std::string(domain::to_string(d.next))));
      event_id =
          insert_draft(tx, domain::order_status_updated_event(order_id, current.status, d.next));
      break;
    case domain::order_command::cancel:
      updated = to_order(tx.exec_prepared1("set_cancelling", order_id, reason));
      event_id = insert_draft(tx, domain::order_cancellation_event(order_id));
      break;
    case domain::order_command::remove:
      updated = to_order(tx.exec_prepared1("mark_deleted", order_id));
      break;
    }
    tx.commit();
    if (event_id)
      announce(event_id);
    return domain::command_outcome{kind::applied, std::move(updated), {}};
  });
}

std::vector<domain::order> order_repository::list(std::optional<domain::order_status> status,
                                                  std::optional<std::int64_t> before_id,
                                                  int limit) {
  return pool_.run([&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    std::optional<std::string> s;
    if (status)
      s = std::string(domain::to_string(*status));
    std::vector<domain::order> out;
    for (const auto& r : tx.exec_prepared("list_orders", s, before_id, limit))
      out.push_back(to_order(r));
    return out;
  });
}

std::optional<domain::order_timeline> order_repository::timeline(std::int64_t order_id) {
  return pool_.run([&](pqxx::connection& c) -> std::optional<domain::order_timeline> {
    // One snapshot, so events, attempts and dead letters agree with each other.
    pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
    auto found = tx.exec_prepared("find_order", order_id);
    if (found.empty())
      return std::nullopt;
    domain::order_timeline t{to_order(found[0]), {}, {}, {}};
    auto aggregate = std::to_string(order_id);
    for (const auto& r : tx.exec_prepared("events_of_order", aggregate))
      t.events.push_back(to_event(r));
    for (const auto& r : tx.exec_prepared("attempts_of_order", aggregate))
      t.attempts.push_back(to_attempt(r));
    for (const auto& r : tx.exec_prepared("dead_letters_of_order", aggregate))
      t.dead_letters.push_back(to_dead_letter(r));
    return t;
  });
}

} // namespace outboxd::persistence
