// Order intake and inspection queries. The state machine decides inside the transaction, on the
// row locked FOR UPDATE, so concurrent commands on one order serialise.
#include "persistence/order_repository.hpp"

#include "persistence/rows.hpp"

#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

using namespace std::string_literals;

// A batch of creates in one statement: the requests as arrays, in order (n). The ids are drawn
// before the insert so that each request finds its own row; a request whose Idempotency-Key is
// taken (by an earlier order, or by an earlier request of the batch) gets a row of NULLs.
const std::string insert_orders =
    "WITH input AS MATERIALIZED ("
    "  SELECT nextval('orders_id_seq') AS id, t.* FROM unnest($1::text[], $2::numeric[], "
    "    $3::text[], $4::text[], $5::text[], $6::bigint[]) WITH ORDINALITY "
    "    AS t(customer_id, total_amount, currency, shipping_type, request_key, request_hash, n)), "
    "inserted AS ("
    "  INSERT INTO orders (id, customer_id, total_amount, currency, shipping_type, request_key, "
    "    request_hash) "
    "  SELECT id, customer_id, total_amount, currency, shipping_type, request_key, request_hash "
    "    FROM input ORDER BY n "
    "  ON CONFLICT (request_key) DO NOTHING RETURNING "s +
    order_columns +
    ") "
    "SELECT inserted.* FROM input LEFT JOIN inserted ON inserted.id = input.id ORDER BY input.n";
// The events of a batch, ids in the batch's order.
const std::string insert_events =
    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
    "idempotency_key) "
    "SELECT aggregate_type, aggregate_id, event_type, payloads::jsonb, idempotency_key "
    "  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY "
    "  AS t(aggregate_type, aggregate_id, event_type, payloads, idempotency_key, n) "
    "ORDER BY n RETURNING id";
const std::string order_by_request_key =
    "SELECT "s + order_columns + ", request_hash, deleted FROM orders WHERE request_key = $1";
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
// The newest $2 rows with ids above $3 (the caller asks for one more than it lists, to tell
// whether there are).
const std::string attempts_of_order =
    "SELECT * FROM (SELECT "s + attempt_columns +
    " FROM aggregate_results WHERE aggregate_id = $1 AND aggregate_type = 'order' AND id > $3 "
    "ORDER BY id DESC LIMIT $2) newest ORDER BY id";
const std::string dead_letters_of_order = "SELECT "s + dead_letter_columns +
                                          " FROM dead_letter_events WHERE aggregate_id = $1 "
                                          "AND aggregate_type = 'order' ORDER BY id";

/// A PostgreSQL array literal of `values` (nullopt is NULL), for a text[]-castable parameter.
std::string array_literal(const std::vector<std::optional<std::string>>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i)
      out += ',';
    if (!values[i]) {
      out += "NULL";
      continue;
    }
    out += '"';
    for (char c : *values[i]) {
      if (c == '"' || c == '\\')
        out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + '}';
}

/// Inserts the event; returns its id.
std::int64_t insert_draft(pqxx::work& tx, const domain::event_draft& e) {
  return tx
      .exec_prepared1("insert_event", e.aggregate_type, e.aggregate_id, e.event_type,
                      e.payloads_json, e.idempotency_key)[0]
      .as<std::int64_t>();
}

} // namespace

std::vector<statement> order_repository::statements() {
  return {{"insert_orders", insert_orders},
          {"insert_events", insert_events},
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

order_repository::order_repository(connection_pool& pool, intake_notifier* notifier,
                                   std::function<void(std::size_t orders)> on_batch)
    : pool_(pool), notifier_(notifier), on_batch_(std::move(on_batch)),
      creates_(intake_writers, max_intake_batch, intake_overlap_after,
               [this](std::span<create_batch::entry*> batch) { write_creates(batch); }) {}

domain::create_outcome order_repository::create(const domain::new_order& request,
                                                const std::optional<std::string>& request_key) {
  return creates_.submit({request, request_key});
}

void order_repository::write_creates(std::span<create_batch::entry*> batch) {
  auto written = pool_.run([&](pqxx::connection& c) -> std::optional<written_batch> {
    if (batch.size() == 1)
      return insert_batch(c, batch);
    try {
      return insert_batch(c, batch);
    } catch (const pqxx::serialization_failure&) {
      throw; // the pool runs the batch again
    } catch (const pqxx::deadlock_detected&) {
      throw;
    } catch (const std::exception& e) {
      if (is_connection_loss(e))
        throw; // the database is gone: every request of the batch gets the error
      return std::nullopt;
    }
  });
  if (written) {
    for (std::size_t i = 0; i < batch.size(); ++i)
      batch[i]->result = std::move(written->outcomes[i]);
    announce(written->last_event_id);
    if (on_batch_)
      on_batch_(batch.size());
    return;
  }
  for (auto* e : batch) {
    try {
      write_creates(std::span<create_batch::entry*>(&e, 1));
    } catch (...) {
      e->error = std::current_exception();
    }
  }
}

order_repository::written_batch
order_repository::insert_batch(pqxx::connection& c, std::span<create_batch::entry*> batch) {
  std::vector<std::optional<std::string>> customer, amount, currency, shipping, key, hash;
  for (const auto* e : batch) {
    const auto& r = e->request->order;
    customer.emplace_back(r.customer_id);
    amount.emplace_back(domain::to_decimal(r.total_amount));
    currency.emplace_back(r.currency);
    shipping.emplace_back(std::string(domain::to_string(r.shipping)));
    key.push_back(e->request->key);
    hash.push_back(e->request->key ? std::optional(std::to_string(domain::fingerprint(r)))
                                   : std::nullopt);
  }
  pqxx::work tx(c);
  auto rows = tx.exec_prepared("insert_orders", array_literal(customer), array_literal(amount),
                               array_literal(currency), array_literal(shipping), array_literal(key),
                               array_literal(hash));
  written_batch out;
  std::vector<std::optional<std::string>> types, ids, names, payloads, event_keys;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& r = *batch[i]->request;
    if (rows[i][0].is_null()) {
      // The key was used before (possibly by a transaction that committed while we waited, or
      // by an earlier request of this batch).
      auto existing = tx.exec_prepared1("order_by_request_key", *r.key);
      using kind = domain::create_outcome::kind;
      bool same =
          !existing[9].is_null() && existing[9].as<std::int64_t>() == domain::fingerprint(r.order);
      out.outcomes.push_back({existing[10].as<bool>() ? kind::key_removed
                              : same                  ? kind::replayed
                                                      : kind::key_reused,
                              to_order(existing)});
      continue;
    }
    auto o = to_order(rows[i]);
    auto e = domain::order_created_event(o, r.order.items);
    types.emplace_back(e.aggregate_type);
    ids.emplace_back(e.aggregate_id);
    names.emplace_back(e.event_type);
    payloads.emplace_back(e.payloads_json);
    event_keys.emplace_back(e.idempotency_key);
    out.outcomes.push_back({domain::create_outcome::kind::created, std::move(o)});
  }
  if (!types.empty()) {
    for (const auto& id :
         tx.exec_prepared("insert_events", array_literal(types), array_literal(ids),
                          array_literal(names), array_literal(payloads), array_literal(event_keys)))
      out.last_event_id = std::max(out.last_event_id, id[0].as<std::int64_t>());
  }
  tx.commit();
  return out;
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
      event_id = insert_draft(tx, domain::order_cancellation_event(order_id, reason));
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

std::optional<domain::order_timeline> order_repository::timeline(std::int64_t order_id,
                                                                 std::int64_t after_attempt) {
  return pool_.run([&](pqxx::connection& c) -> std::optional<domain::order_timeline> {
    // One snapshot, so events, attempts and dead letters agree with each other.
    pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> tx(c);
    auto found = tx.exec_prepared("find_order", order_id);
    if (found.empty())
      return std::nullopt;
    domain::order_timeline t{to_order(found[0]), {}, {}, false, {}};
    auto aggregate = std::to_string(order_id);
    for (const auto& r : tx.exec_prepared("events_of_order", aggregate))
      t.events.push_back(to_event(r));
    auto attempts = tx.exec_prepared("attempts_of_order", aggregate,
                                     domain::max_timeline_attempts + 1, after_attempt);
    t.attempts_truncated = attempts.size() > domain::max_timeline_attempts;
    for (auto r = attempts.begin() + (t.attempts_truncated ? 1 : 0); r != attempts.end(); ++r)
      t.attempts.push_back(to_attempt(*r));
    for (const auto& r : tx.exec_prepared("dead_letters_of_order", aggregate))
      t.dead_letters.push_back(to_dead_letter(r));
    return t;
  });
}

} // namespace outboxd::persistence
