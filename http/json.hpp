// JSON in and out of the HTTP layer: request body parsing and a small writer with the codecs of
// the API's resources (orders, events, attempts, dead letters, the fan-out).
#pragma once

#include "domain/ports.hpp"
#include "domain/routing.hpp"

#include <optional>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <string>
#include <string_view>

namespace httplib {
struct Request;
}

namespace outboxd::http {

/// Already-serialised JSON for json_writer::value (a JSONB column, a decimal number): written as
/// is, null when absent. Holds a view: use it within the expression that writes it.
struct raw_json {
  explicit raw_json(const std::string& json, rapidjson::Type type = rapidjson::kObjectType)
      : text(json), type(type) {}
  explicit raw_json(const std::optional<std::string>& json,
                    rapidjson::Type type = rapidjson::kObjectType)
      : type(type) {
    if (json)
      text = *json;
  }
  std::optional<std::string_view> text;
  rapidjson::Type type;
};

/// A thin wrapper over rapidjson::Writer with string_view keys and optional fields.
class json_writer {
public:
  json_writer() : w_(buffer_) {}

  void start_object() { w_.StartObject(); }
  void end_object() { w_.EndObject(); }
  void start_array() { w_.StartArray(); }
  void end_array() { w_.EndArray(); }
  void key(std::string_view k) { w_.Key(k.data(), static_cast<rapidjson::SizeType>(k.size())); }
  void value(std::string_view s) {
    w_.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  }
  void value(const char* s) { value(std::string_view(s)); }
  void value(const std::string& s) { value(std::string_view(s)); }
  void value(std::int64_t n) { w_.Int64(n); }
  void value(int n) { w_.Int(n); }
  void value(bool b) { w_.Bool(b); }
  void value(double d) { w_.Double(d); }
  void null() { w_.Null(); }
  /// Inserts already-serialised JSON (a JSONB column, a decimal number).
  void raw(std::string_view json, rapidjson::Type type) {
    w_.RawValue(json.data(), json.size(), type);
  }

  template <class T> void field(std::string_view k, const T& v) {
    key(k);
    value(v);
  }
  void value(const raw_json& v) {
    if (v.text)
      raw(*v.text, v.type);
    else
      null();
  }
  template <class T> void value(const std::optional<T>& v) {
    if (v)
      value(*v);
    else
      null();
  }

  /// One whole object from alternating keys and values:
  /// `object("id", o.id, "payloads", raw_json{o.payloads})`.
  template <class... KeysAndValues> void object(const KeysAndValues&... kv) {
    static_assert(sizeof...(kv) % 2 == 0, "object() takes key, value pairs");
    start_object();
    members(kv...);
    end_object();
  }

  /// Members of an object already started, from alternating keys and values.
  template <class... KeysAndValues> void fields(const KeysAndValues&... kv) {
    static_assert(sizeof...(kv) % 2 == 0, "fields() takes key, value pairs");
    members(kv...);
  }

  std::string str() const { return {buffer_.GetString(), buffer_.GetSize()}; }

private:
  void members() {}
  template <class V, class... Rest>
  void members(std::string_view k, const V& v, const Rest&... rest) {
    key(k);
    value(v);
    members(rest...);
  }

  rapidjson::StringBuffer buffer_;
  rapidjson::Writer<rapidjson::StringBuffer> w_;
};

/// Whether the request's Content-Type is application/json (parameters such as charset allowed).
bool is_json_request(const httplib::Request& req);

/// Parses a request body as JSON. Throws api_error: 415 when a body comes with another content
/// type, 400 when it is not well-formed UTF-8 JSON (the message says where). An empty body gives
/// nullopt when `required` is false, else a 400.
std::optional<rapidjson::Document> parse_json_body(const httplib::Request& req, bool required);

/// The request's `Idempotency-Key` header, nullopt when absent; a validation_failed api_error
/// naming the header when it is not 1 to 255 printable ASCII characters without spaces.
std::optional<std::string> idempotency_key(const httplib::Request& req);

void write_order(json_writer& w, const domain::order& o);
void write_event(json_writer& w, const domain::event_record& e);
void write_attempt(json_writer& w, const domain::attempt_record& a);
void write_dead_letter(json_writer& w, const domain::dead_letter_record& d);
std::string order_json(const domain::order& o);
std::string timeline_json(const domain::order_timeline& t);
/// `{"event": {...}, "attempts": [...]}`.
std::string event_detail_json(const domain::event_record& e,
                              const std::vector<domain::attempt_record>& attempts);
/// `{"deadLetter": {...}, "attempts": [...]}`.
std::string dead_letter_detail_json(const domain::dead_letter_record& d,
                                    const std::vector<domain::attempt_record>& attempts);
/// `{"eventTypes": {"<type>": [{"destination", "revertible"}...]}}`: per event type the
/// destinations in call order; revertible when some route of the destination has a revert.
std::string fanout_json(const domain::routing_table& routing);

} // namespace outboxd::http
