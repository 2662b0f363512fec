// The consistency check's queries: a window of orders walked through the primary key, one more
// row than asked telling whether the table goes on. created_at is truncated to whole
// milliseconds, the resolution of the ledger's start time it is compared with.
#include "persistence/audit_repository.hpp"

#include <algorithm>
#include <stdexcept>

namespace outboxd::persistence {
namespace {

constexpr const char* columns =
    "SELECT id, order_status, floor(extract(epoch FROM created_at) * 1000)::bigint FROM orders ";
const std::string newest_sql = std::string(columns) + "WHERE NOT deleted ORDER BY id DESC LIMIT $1";
const std::string after_sql =
    std::string(columns) + "WHERE NOT deleted AND id > $1 ORDER BY id LIMIT $2";
constexpr const char* before_sql =
    "SELECT EXISTS (SELECT 1 FROM orders WHERE NOT deleted AND id <= $1)";

} // namespace

std::vector<statement> audit_repository::statements() {
  return {{"audited_orders_newest", newest_sql},
          {"audited_orders_after", after_sql},
          {"audited_orders_before", before_sql}};
}

domain::audited_orders_page audit_repository::audited_orders(const domain::audit_window& window) {
  return pool_.run([&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    const long long asked = window.limit + 1LL;
    auto rows = window.after_id ? tx.exec_prepared("audited_orders_after", *window.after_id, asked)
                                : tx.exec_prepared("audited_orders_newest", asked);
    domain::audited_orders_page page;
    const bool more = rows.size() > static_cast<std::size_t>(window.limit);
    (window.after_id ? page.newer : page.older) = more;
    for (const auto& r : rows) {
      if (page.orders.size() == static_cast<std::size_t>(window.limit))
        break;
      auto status = domain::parse_order_status(r[1].c_str());
      if (!status)
        throw std::logic_error("orders.order_status is unknown: " + r[1].as<std::string>());
      page.orders.push_back({r[0].as<std::int64_t>(), *status, r[2].as<std::int64_t>()});
    }
    if (window.after_id)
      page.older = tx.exec_prepared1("audited_orders_before", *window.after_id)[0].as<bool>();
    else
      std::reverse(page.orders.begin(), page.orders.end());
    return page;
  });
}

} // namespace outboxd::persistence
