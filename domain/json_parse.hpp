// Parsing JSON that someone else wrote (request bodies, knob patches, configuration files) into a
// rapidjson document whose depth is bounded. rapidjson parses iteratively when asked, but much of
// what reads a document afterwards recurses (Accept, CopyFrom, the walks of validation and
// templates): a body of 100 000 nested brackets parsed fine and then overflowed the stack of the
// thread that printed it. Refusing the depth at the parse bounds every later walk.
#pragma once

#include "domain/response_body.hpp"

#include <cstddef>
#include <fmt/format.h>
#include <optional>
#include <rapidjson/document.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <string>
#include <string_view>

namespace outboxd::domain {

/// Why a text is not accepted as JSON, and where (a byte offset).
struct json_parse_error {
  std::string message;
  std::size_t offset = 0;
};

namespace detail {

/// Whether `s` holds an encoded UTF-16 surrogate (ED A0..BF): what rapidjson makes of a
/// `\uDC00` escape without the high half before it. Not UTF-8, so PostgreSQL (and any strict
/// reader) refuses it.
inline bool holds_surrogate(const char* s, rapidjson::SizeType n) {
  for (rapidjson::SizeType i = 0; i + 1 < n; ++i)
    if (static_cast<unsigned char>(s[i]) == 0xED &&
        (static_cast<unsigned char>(s[i + 1]) & 0xE0) == 0xA0)
      return true;
  return false;
}

/// Hands rapidjson's events on to a document while counting the depth: nesting deeper than
/// `limit` ends the parse, and so does a string or name with a lone surrogate escape.
template <class Document> struct depth_bounded_handler {
  Document& doc;
  int limit;
  int depth = 0;
  bool too_deep = false;
  bool lone_surrogate = false;

  bool Null() { return doc.Null(); }
  bool Bool(bool b) { return doc.Bool(b); }
  bool Int(int i) { return doc.Int(i); }
  bool Uint(unsigned u) { return doc.Uint(u); }
  bool Int64(std::int64_t i) { return doc.Int64(i); }
  bool Uint64(std::uint64_t u) { return doc.Uint64(u); }
  bool Double(double d) { return doc.Double(d); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool copy) {
    return doc.RawNumber(s, n, copy);
  }
  bool String(const char* s, rapidjson::SizeType n, bool copy) {
    return text_ok(s, n) && doc.String(s, n, copy);
  }
  bool Key(const char* s, rapidjson::SizeType n, bool copy) {
    return text_ok(s, n) && doc.Key(s, n, copy);
  }
  bool text_ok(const char* s, rapidjson::SizeType n) {
    lone_surrogate = holds_surrogate(s, n);
    return !lone_surrogate;
  }
  bool StartObject() { return enter() && doc.StartObject(); }
  bool EndObject(rapidjson::SizeType n) {
    --depth;
    return doc.EndObject(n);
  }
  bool StartArray() { return enter() && doc.StartArray(); }
  bool EndArray(rapidjson::SizeType n) {
    --depth;
    return doc.EndArray(n);
  }

  bool enter() {
    too_deep = ++depth > limit;
    return !too_deep;
  }
};

} // namespace detail

/// Parses `text` into `doc` (iteratively, with rapidjson's `Flags` besides), refusing nesting
/// deeper than `max_depth` objects and arrays. nullopt when `doc` holds the value; otherwise why
/// not, and `doc` is null.
template <unsigned Flags>
std::optional<json_parse_error> parse_json_bounded(rapidjson::Document& doc, std::string_view text,
                                                   int max_depth = max_json_depth) {
  rapidjson::ParseResult result;
  bool too_deep = false;
  bool lone_surrogate = false;
  std::size_t read = 0;
  auto generate = [&](rapidjson::Document& target) {
    detail::depth_bounded_handler<rapidjson::Document> handler{target, max_depth};
    rapidjson::MemoryStream bytes(text.data(), text.size());
    rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> stream(bytes);
    rapidjson::Reader reader;
    result = reader.Parse<Flags | rapidjson::kParseIterativeFlag>(stream, handler);
    too_deep = handler.too_deep;
    lone_surrogate = handler.lone_surrogate;
    read = bytes.Tell();
    return !result.IsError();
  };
  doc.SetNull();
  doc.Populate(generate);
  // rapidjson reads a NUL byte as the end of the text: a value followed by one and anything after
  // it would pass, and a body that a proxy inspected would not be the one read here.
  if (!result.IsError() && read < text.size()) {
    doc.SetNull();
    return json_parse_error{"a NUL byte after the value (only whitespace may follow it)", read};
  }
  if (!result.IsError())
    return std::nullopt;
  doc.SetNull();
  if (too_deep)
    return json_parse_error{fmt::format("nested deeper than {} levels", max_depth),
                            result.Offset()};
  if (lone_surrogate)
    return json_parse_error{"a string holds half of a UTF-16 surrogate pair (a \\uD800-\\uDFFF "
                            "escape without its other half), which is not a character",
                            result.Offset()};
  return json_parse_error{rapidjson::GetParseError_En(result.Code()), result.Offset()};
}

} // namespace outboxd::domain
