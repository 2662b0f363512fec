// GET /api/admin/consistency: the orders of the database checked against the simulator's ledger
// (SPEC invariant 3), with the ledger read in-process or from a standalone simulator.
#pragma once

#include "domain/consistency.hpp"
#include "domain/expected.hpp"

#include <functional>
#include <string>
#include <string_view>

namespace httplib {
class Server;
}

namespace outboxd::http {

/// Registers `GET /api/admin/consistency` → `{"checked": N, "unchecked": N, "violations":
/// [{"orderId": 42, "problem": "..."}]}`. `fetch_ledger_json` returns the JSON of GET
/// /api/simulator/ledger; it may throw api_error (a 503 when the simulator is unreachable).
/// `orders` and whatever `fetch_ledger_json` uses must outlive the server. The orders are read
/// before the ledger, so an order created in between is never judged against a ledger that
/// misses its effects.
void install_consistency_route(httplib::Server& server, domain::order_audit_source& orders,
                               std::function<std::string()> fetch_ledger_json);

/// A ledger fetcher for a standalone simulator at `base_url` (e.g. "http://127.0.0.1:9100"):
/// GET <base_url>/api/simulator/ledger with TCP_NODELAY, a 2 s connect and 10 s read timeout.
/// Throws api_error(unavailable) naming the URL when it cannot be reached or does not answer 200.
std::function<std::string()> remote_ledger(const std::string& base_url);

/// Parses the ledger JSON (entries and startedAtMs); an error names what is wrong.
domain::expected<domain::ledger_snapshot> parse_ledger_json(std::string_view json);

/// The route's JSON for a report.
std::string consistency_json(const domain::consistency_report& report);

} // namespace outboxd::http
