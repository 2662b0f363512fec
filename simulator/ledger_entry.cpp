// The ledger's JSON both ways. Rendering writes rapidjson directly (this part links no HTTP
// code); the parser is lenient about fields the consistency check does not need.
#include "simulator/ledger_entry.hpp"

#include <ctime>
#include <fmt/format.h>
#include <map>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <tuple>

namespace outboxd::simulator {
namespace {

using rapidjson::Value;
using writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key(writer& w, std::string_view k) {
  w.Key(k.data(), static_cast<rapidjson::SizeType>(k.size()));
}

void text(writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

void text_or_null(writer& w, const std::optional<std::string>& s) {
  if (s)
    text(w, *s);
  else
    w.Null();
}

void ms_or_null(writer& w, const std::optional<std::int64_t>& ms) {
  if (ms)
    w.Int64(*ms);
  else
    w.Null();
}

void write_entry(writer& w, const ledger_entry& e) {
  w.StartObject();
  key(w, "id");
  text(w, e.id);
  key(w, "aggregateId");
  text(w, e.aggregate_id);
  key(w, "operation");
  text(w, e.operation);
  key(w, "kind");
  text(w, e.kind);
  key(w, "notificationType");
  text_or_null(w, e.notification_type);
  key(w, "idempotencyKey");
  text_or_null(w, e.idempotency_key);
  key(w, "revertible");
  w.Bool(is_revertible_kind(e.kind));
  key(w, "applied");
  w.Int(1);
  key(w, "revertRequests");
  w.Int(e.revert_requests);
  key(w, "state");
  text(w, e.reverted ? "reverted" : "active");
  key(w, "appliedAt");
  text(w, iso_time(e.applied_at_ms));
  key(w, "appliedAtMs");
  w.Int64(e.applied_at_ms);
  key(w, "appliedSeq");
  w.Int64(e.applied_seq);
  key(w, "revertedAt");
  text_or_null(w, e.reverted_at_ms ? std::optional(iso_time(*e.reverted_at_ms)) : std::nullopt);
  key(w, "revertedAtMs");
  ms_or_null(w, e.reverted_at_ms);
  key(w, "revertedSeq");
  ms_or_null(w, e.reverted_seq);
  w.EndObject();
}

const Value* member(const Value& o, const char* name) {
  auto it = o.FindMember(name);
  return it == o.MemberEnd() ? nullptr : &it->value;
}

std::optional<std::string> string_member(const Value& o, const char* name) {
  const Value* v = member(o, name);
  if (v && v->IsString())
    return std::string(v->GetString(), v->GetStringLength());
  return std::nullopt;
}

std::optional<std::int64_t> int_member(const Value& o, const char* name) {
  const Value* v = member(o, name);
  if (v && v->IsInt64())
    return v->GetInt64();
  return std::nullopt;
}

} // namespace

bool is_revertible_kind(std::string_view kind) {
  return kind == "reservation" || kind == "shipment" || kind == "charge" ||
         kind == "highValueProcessing";
}

std::string iso_time(std::int64_t ms) {
  auto seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

std::string ledger_json(const ledger_snapshot& ledger,
                        const std::optional<std::string>& aggregate_id) {
  rapidjson::StringBuffer buffer;
  writer w(buffer);
  w.StartObject();
  key(w, "startedAt");
  text(w, iso_time(ledger.started_at_ms));
  key(w, "startedAtMs");
  w.Int64(ledger.started_at_ms);
  key(w, "entries");
  w.StartArray();
  // (aggregate, operation, notification type) -> entries, for the duplicates section.
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<const ledger_entry*>>
      groups;
  for (const auto& e : ledger.entries) {
    if (aggregate_id && e.aggregate_id != *aggregate_id)
      continue;
    write_entry(w, e);
    groups[{e.aggregate_id, e.operation, e.notification_type.value_or("")}].push_back(&e);
  }
  w.EndArray();
  key(w, "duplicates");
  w.StartArray();
  for (const auto& [group_key, group] : groups) {
    if (group.size() < 2)
      continue;
    const auto& first = *group.front();
    w.StartObject();
    key(w, "aggregateId");
    text(w, first.aggregate_id);
    key(w, "operation");
    text(w, first.operation);
    key(w, "notificationType");
    text_or_null(w, first.notification_type);
    key(w, "count");
    w.Int(static_cast<int>(group.size()));
    key(w, "ids");
    w.StartArray();
    for (const auto* e : group)
      text(w, e->id);
    w.EndArray();
    key(w, "idempotencyKeys");
    w.StartArray();
    for (const auto* e : group)
      text_or_null(w, e->idempotency_key);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return {buffer.GetString(), buffer.GetSize()};
}

domain::expected<ledger_snapshot> parse_ledger_json(std::string_view json) {
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  if (doc.HasParseError() || !doc.IsObject())
    return domain::error{"the ledger is not a JSON object"};
  ledger_snapshot snapshot;
  auto started = int_member(doc, "startedAtMs");
  if (!started)
    return domain::error{"the ledger has no startedAtMs"};
  snapshot.started_at_ms = *started;
  const Value* entries = member(doc, "entries");
  if (!entries || !entries->IsArray())
    return domain::error{"the ledger has no entries array"};
  for (rapidjson::SizeType i = 0; i < entries->Size(); ++i) {
    const Value& e = (*entries)[i];
    const bool object = e.IsObject();
    auto aggregate = object ? string_member(e, "aggregateId") : std::nullopt;
    auto operation = object ? string_member(e, "operation") : std::nullopt;
    auto kind = object ? string_member(e, "kind") : std::nullopt;
    auto id = object ? string_member(e, "id") : std::nullopt;
    auto state = object ? string_member(e, "state") : std::nullopt;
    auto seq = object ? int_member(e, "appliedSeq") : std::nullopt;
    const Value* requests = object ? member(e, "revertRequests") : nullptr;
    if (!aggregate || !operation || !kind || !id || !state || !seq || !requests ||
        !requests->IsInt())
      return domain::error{fmt::format("ledger entry {} lacks aggregateId, operation, kind, id, "
                                       "state, appliedSeq or revertRequests",
                                       i)};
    ledger_entry r;
    r.id = std::move(*id);
    r.aggregate_id = std::move(*aggregate);
    r.operation = std::move(*operation);
    r.kind = std::move(*kind);
    r.notification_type = string_member(e, "notificationType");
    r.idempotency_key = string_member(e, "idempotencyKey");
    r.revert_requests = requests->GetInt();
    r.reverted = *state == "reverted";
    r.applied_at_ms = int_member(e, "appliedAtMs").value_or(0);
    r.applied_seq = *seq;
    r.reverted_at_ms = int_member(e, "revertedAtMs");
    r.reverted_seq = int_member(e, "revertedSeq");
    snapshot.entries.push_back(std::move(r));
  }
  return snapshot;
}

} // namespace outboxd::simulator
