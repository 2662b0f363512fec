// The consistency route, the remote ledger client and the ledger parser.
#include "http/consistency.hpp"

#include "http/errors.hpp"
#include "http/json.hpp"
#include "log/log.hpp"

#include <fmt/format.h>
#include <httplib.h>

namespace outboxd::http {
namespace {

using rapidjson::Value;

constexpr const char* ledger_path = "/api/simulator/ledger";

const Value* member(const Value& o, const char* name) {
  auto it = o.FindMember(name);
  return it == o.MemberEnd() ? nullptr : &it->value;
}

std::optional<std::string> text(const Value& o, const char* name) {
  const Value* v = member(o, name);
  if (v && v->IsString())
    return std::string(v->GetString(), v->GetStringLength());
  return std::nullopt;
}

} // namespace

domain::expected<domain::ledger_snapshot> parse_ledger_json(std::string_view json) {
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  if (doc.HasParseError() || !doc.IsObject())
    return domain::error{"the ledger is not a JSON object"};
  domain::ledger_snapshot snapshot;
  const Value* started = member(doc, "startedAtMs");
  if (!started || !started->IsInt64())
    return domain::error{"the ledger has no startedAtMs"};
  snapshot.started_at_ms = started->GetInt64();
  const Value* entries = member(doc, "entries");
  if (!entries || !entries->IsArray())
    return domain::error{"the ledger has no entries array"};
  for (rapidjson::SizeType i = 0; i < entries->Size(); ++i) {
    const Value& e = (*entries)[i];
    domain::ledger_record r;
    auto aggregate = e.IsObject() ? text(e, "aggregateId") : std::nullopt;
    auto operation = e.IsObject() ? text(e, "operation") : std::nullopt;
    auto kind = e.IsObject() ? text(e, "kind") : std::nullopt;
    auto id = e.IsObject() ? text(e, "id") : std::nullopt;
    auto state = e.IsObject() ? text(e, "state") : std::nullopt;
    const Value* seq = e.IsObject() ? member(e, "appliedSeq") : nullptr;
    const Value* requests = e.IsObject() ? member(e, "revertRequests") : nullptr;
    if (!aggregate || !operation || !kind || !id || !state || !seq || !seq->IsInt64() ||
        !requests || !requests->IsInt())
      return domain::error{fmt::format("ledger entry {} lacks aggregateId, operation, kind, id, "
                                       "state, appliedSeq or revertRequests",
                                       i)};
    r.aggregate_id = *aggregate;
    r.operation = *operation;
    r.kind = *kind;
    r.id = *id;
    r.notification_type = text(e, "notificationType");
    r.revert_requests = requests->GetInt();
    r.reverted = *state == "reverted";
    r.applied_seq = seq->GetInt64();
    if (const Value* reverted = member(e, "revertedSeq"); reverted && reverted->IsInt64())
      r.reverted_seq = reverted->GetInt64();
    snapshot.entries.push_back(std::move(r));
  }
  return snapshot;
}

std::string consistency_json(const domain::consistency_report& report) {
  json_writer w;
  w.start_object();
  w.field("checked", report.checked);
  w.field("unchecked", report.unchecked);
  w.key("violations");
  w.start_array();
  for (const auto& v : report.violations) {
    w.start_object();
    w.field("orderId", v.order_id);
    w.field("problem", v.problem);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.str();
}

void install_consistency_route(httplib::Server& server, domain::order_audit_source& orders,
                               std::function<std::string()> fetch_ledger_json) {
  server.Get("/api/admin/consistency", [&orders, fetch = std::move(fetch_ledger_json)](
                                           const httplib::Request&, httplib::Response& res) {
    auto audited = orders.audited_orders();
    auto ledger = parse_ledger_json(fetch());
    if (!ledger)
      throw api_error(error_kind::unavailable,
                      fmt::format("the simulator ledger cannot be read: {}", ledger.err().message));
    auto report = domain::check_consistency(audited, ledger.value());
    if (!report.violations.empty())
      log::warn("consistency", "{} of {} checked orders violate invariant 3; first: order {}: {}",
                report.violations.size(), report.checked, report.violations.front().order_id,
                report.violations.front().problem);
    res.set_content(consistency_json(report), "application/json");
  });
}

std::function<std::string()> remote_ledger(const std::string& base_url) {
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
  return [origin, path, url = base + ledger_path]() -> std::string {
    auto unavailable = [&](const std::string& why) {
      return api_error(error_kind::unavailable,
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
  };
}

} // namespace outboxd::http
