// The consistency check's one query. created_at is truncated to whole milliseconds, the
// resolution of the ledger's start time it is compared with.
#include "persistence/audit_repository.hpp"

#include <stdexcept>

namespace outboxd::persistence {
namespace {

const std::string audited_orders_sql =
    "SELECT id, order_status, floor(extract(epoch FROM created_at) * 1000)::bigint "
    "FROM orders WHERE NOT deleted ORDER BY id";

} // namespace

std::vector<statement> audit_repository::statements() {
  return {{"audited_orders", audited_orders_sql}};
}

std::vector<domain::audited_order> audit_repository::audited_orders() {
  return pool_.run([](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    std::vector<domain::audited_order> out;
    for (const auto& r : tx.exec_prepared("audited_orders")) {
      auto status = domain::parse_order_status(r[1].c_str());
      if (!status)
        throw std::logic_error("orders.order_status is unknown: " + r[1].as<std::string>());
      out.push_back({r[0].as<std::int64_t>(), *status, r[2].as<std::int64_t>()});
    }
    return out;
  });
}

} // namespace outboxd::persistence
