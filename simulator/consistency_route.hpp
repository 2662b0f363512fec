// GET /api/admin/consistency: the orders of the database checked against the simulator's ledger,
// read in-process (the entries themselves) or from a standalone simulator over HTTP.
#pragma once

#include "domain/ports.hpp"
#include "http/listener.hpp"
#include "simulator/consistency.hpp"
#include "simulator/ledger_entry.hpp"

#include <functional>
#include <string>

namespace outboxd::simulator {

/// Where the route reads the ledger; may throw http::api_error (a 503 when it cannot be read).
using ledger_source = std::function<ledger_snapshot()>;

/// Registers `GET /api/admin/consistency[?cursor=&limit=]` → `{"checked": N, "unchecked": N,
/// "firstOrderId", "lastOrderId", "earlierOrders", "nextCursor", "violations": [{"orderId": 42,
/// "problem": "..."}]}` as a `route_kind::api` route: the newest `limit` orders (100 000), or the
/// first `limit` after the cursor. `orders` and whatever
/// `read_ledger` uses must outlive the server. The orders are read before the ledger, so an order
/// created in between is never judged against a ledger that misses its effects.
void install_consistency_route(http::listener& routes, domain::order_audit_source& orders,
                               ledger_source read_ledger);

/// A ledger source over a fetcher of ledger JSON: parses what `fetch_json` returns and throws
/// http::api_error(unavailable) "the simulator ledger cannot be read: ..." when it is not a ledger.
ledger_source ledger_from_json(std::function<std::string()> fetch_json);

/// A ledger source for a standalone simulator at `base_url` (e.g. "http://127.0.0.1:9100"):
/// GET <base_url>/api/simulator/ledger with TCP_NODELAY, a 2 s connect and 10 s read timeout.
/// Throws http::api_error(unavailable) naming the URL when it cannot be reached or does not
/// answer 200.
ledger_source remote_ledger(const std::string& base_url);

/// The route's JSON for a report on the orders of `page`.
std::string consistency_json(const consistency_report& report,
                             const domain::audited_orders_page& page);

} // namespace outboxd::simulator
