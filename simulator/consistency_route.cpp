// The consistency route and the remote ledger client.
#include "simulator/consistency_route.hpp"

#include "http/errors.hpp"
#include "http/json.hpp"
#include "log/log.hpp"

#include <algorithm>
#include <charconv>
#include <fmt/format.h>
#include <httplib.h>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

namespace outboxd::simulator {
namespace {

constexpr const char* ledger_path = "/api/simulator/ledger";
constexpr int max_window = 1000000;
/// The most violations one answer lists (with their count): a window of a million orders that
/// are all wrong would otherwise be an answer of hundreds of megabytes.
constexpr std::size_t max_listed_violations = 1000;

/// `cursor` (the orders after this id; default: the newest) and `limit` (1..1 000 000, default
/// 100 000): a check reads a bounded window of orders however many the table holds.
domain::audit_window parse_window(const httplib::Request& req) {
  domain::audit_window window;
  domain::field_errors errors;
  auto number = [&](const char* name, std::int64_t lo, std::int64_t hi,
                    const char* expected) -> std::optional<std::int64_t> {
    if (!req.has_param(name))
      return std::nullopt;
    auto s = req.get_param_value(name);
    std::int64_t n = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n < lo || n > hi) {
      errors.push_back({name, fmt::format("must be {}, got '{}'", expected, s)});
      return std::nullopt;
    }
    return n;
  };
  window.after_id = number("cursor", 0, std::numeric_limits<std::int64_t>::max(),
                           "an order id (a value from nextCursor)");
  if (auto limit = number("limit", 1, max_window, "an integer between 1 and 1000000"))
    window.limit = static_cast<int>(*limit);
  if (!errors.empty())
    throw http::validation_error(errors);
  return window;
}

} // namespace

std::string consistency_json(const consistency_report& report,
                             const domain::audited_orders_page& page) {
  http::json_writer w;
  w.start_object();
  w.field("checked", report.checked);
  w.field("unchecked", report.unchecked);
  std::optional<std::int64_t> first, last;
  if (!page.orders.empty()) {
    first = page.orders.front().id;
    last = page.orders.back().id;
  }
  w.field("firstOrderId", first);
  w.field("lastOrderId", last);
  w.field("earlierOrders", page.older);
  w.key("nextCursor");
  if (page.newer && last)
    w.value(std::to_string(*last));
  else
    w.null();
  w.key("violations");
  w.start_array();
  const auto listed = std::min(report.violations.size(), max_listed_violations);
  for (std::size_t i = 0; i < listed; ++i) {
    w.start_object();
    w.field("orderId", report.violations[i].order_id);
    w.field("problem", report.violations[i].problem);
    w.end_object();
  }
  w.end_array();
  w.field("violationCount", static_cast<std::int64_t>(report.violations.size()));
  if (listed < report.violations.size())
    w.field("violationsTruncated", true);
  w.end_object();
  return w.str();
}

void install_consistency_route(http::listener& routes, domain::order_audit_source& orders,
                               ledger_source read_ledger) {
  // The web UI checks every few seconds: a finding is logged at WARN when it is new (another
  // count or first violation than the last check's), at debug when it repeats.
  auto said = std::make_shared<std::pair<std::mutex, std::string>>();
  routes.route("GET", "/api/admin/consistency", http::route_kind::api, http::access::admin,
               [&orders, read = std::move(read_ledger), said](const httplib::Request& req,
                                                              httplib::Response& res) {
                 auto page = orders.audited_orders(parse_window(req));
                 auto report = check_consistency(page.orders, read());
                 if (!report.violations.empty()) {
                   auto finding = fmt::format(
                       "{} order(s) whose side effects disagree with their state among {} checked "
                       "(ids {}..{}); first: order {}: {}",
                       report.violations.size(), report.checked, page.orders.front().id,
                       page.orders.back().id, report.violations.front().order_id,
                       report.violations.front().problem);
                   std::lock_guard lock(said->first);
                   auto level = finding == said->second ? log::level::debug : log::level::warn;
                   said->second = finding;
                   log::write(level, "consistency", finding);
                 }
                 res.set_content(consistency_json(report, page), "application/json");
               });
}

ledger_source ledger_from_json(std::function<std::string()> fetch_json) {
  return [fetch = std::move(fetch_json)] {
    auto ledger = parse_ledger_json(fetch());
    if (!ledger)
      throw http::api_error(
          http::error_kind::unavailable,
          fmt::format("the simulator ledger cannot be read: {}", ledger.err().message));
    return std::move(ledger.value());
  };
}

ledger_source remote_ledger(const std::string& base_url) {
  std::string base = base_url;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  // httplib::Client takes scheme://host:port only; a path prefix goes in front of the route.
  auto scheme_end = base.find("://");
  auto path_start =
      scheme_end == std::string::npos ? std::string::npos : base.find('/', scheme_end + 3);
  std::string origin = base.substr(0, path_start);
  std::string path =
      (path_start == std::string::npos ? std::string() : base.substr(path_start)) + ledger_path;
  return ledger_from_json([origin, path, url = base + ledger_path]() -> std::string {
    auto unavailable = [&](const std::string& why) {
      return http::api_error(
          http::error_kind::unavailable,
          fmt::format("the simulator ledger at {} is unavailable: {}", url, why));
    };
    std::unique_ptr<httplib::Client> client;
    try {
      client = std::make_unique<httplib::Client>(origin);
    } catch (const std::exception& e) {
      throw unavailable(e.what());
    }
    if (!client->is_valid())
      throw unavailable("the URL is not usable");
    client->set_tcp_nodelay(true);
    client->set_connection_timeout(2, 0);
    client->set_read_timeout(10, 0);
    client->set_write_timeout(2, 0);
    auto r = client->Get(path.c_str());
    if (!r)
      throw unavailable(httplib::to_string(r.error()));
    if (r->status != 200)
      throw unavailable(fmt::format("it answered HTTP {}", r->status));
    return r->body;
  });
}

} // namespace outboxd::simulator
