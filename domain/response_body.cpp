// Body classification. The checks mirror what PostgreSQL refuses (jsonb input, UTF8 text) so that
// the engine decides before the INSERT instead of learning it from a failed statement.
#include "domain/response_body.hpp"

#include "domain/names.hpp"

#include <algorithm>
#include <rapidjson/encodedstream.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

namespace outboxd::domain {
namespace {

/// Length of the well-formed UTF-8 sequence starting at s[i], 0 when ill-formed (RFC 3629
/// table 3-7: the second byte's range depends on the first byte).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80)
    return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0)
      lo = 0xA0; // overlong
    else if (c == 0xED)
      hi = 0x9F; // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0)
      lo = 0x90; // overlong
    else if (c == 0xF4)
      hi = 0x8F; // above U+10FFFF
  } else
    return 0;
  if (i + n > s.size())
    return 0;
  if (b(i + 1) < lo || b(i + 1) > hi)
    return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF)
      return 0;
  return n;
}

/// Ill-formed sequences are replaced one maximal prefix at a time (the Unicode "best practice"),
/// which this approximates by skipping the lead byte and its continuation bytes.
std::size_t ill_formed_length(std::string_view s, std::size_t i) {
  std::size_t k = i + 1;
  while (k < s.size() && k - i < 4 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 &&
         static_cast<unsigned char>(s[i]) >= 0xC0)
    ++k;
  return k - i;
}

/// Refuses, while rapidjson parses, what jsonb would refuse. Decoded strings carry a `\u0000`
/// escape as a NUL and a lone low surrogate escape as an encoded surrogate, both caught by
/// is_storable_text; numbers arrive as text (kParseNumbersAsStringsFlag).
struct jsonb_check : rapidjson::BaseReaderHandler<rapidjson::UTF8<>, jsonb_check> {
  int depth = 0;
  bool Default() { return true; }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    return is_storable_text(std::string_view(s, n));
  }
  bool Key(const char* s, rapidjson::SizeType n, bool copy) { return String(s, n, copy); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    // numeric input takes exponents within +-1000 and a limited number of digits.
    if (n > 1000)
      return false;
    std::string_view text(s, n);
    auto e = text.find_first_of("eE");
    if (e == std::string_view::npos)
      return true;
    int exponent = 0;
    for (auto c : text.substr(e + 1)) {
      if (c < '0' || c > '9')
        continue; // the sign
      exponent = exponent * 10 + (c - '0');
      if (exponent > 1000)
        return false;
    }
    return true;
  }
  bool StartObject() { return ++depth <= max_json_depth; }
  bool EndObject(rapidjson::SizeType) {
    --depth;
    return true;
  }
  bool StartArray() { return ++depth <= max_json_depth; }
  bool EndArray(rapidjson::SizeType) {
    --depth;
    return true;
  }
};

bool jsonb_accepts(std::string_view body) {
  // rapidjson reads a NUL byte as the end of its input, so `{}` NUL `garbage` would pass.
  if (body.find('\0') != std::string_view::npos)
    return false;
  // The stream below skips a UTF-8 byte-order mark, which jsonb refuses: such a body is text.
  if (body.starts_with("\xEF\xBB\xBF"))
    return false;
  rapidjson::Reader reader;
  rapidjson::MemoryStream ms(body.data(), body.size());
  rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> in(ms);
  jsonb_check check;
  // Iterative: the depth of a hostile body must not be the depth of this thread's stack.
  constexpr unsigned flags = rapidjson::kParseValidateEncodingFlag |
                             rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag;
  return !reader.Parse<flags>(in, check).IsError();
}

constexpr name_table_entry<body_kind> body_kind_names[] = {{body_kind::empty, "empty"},
                                                           {body_kind::json, "json"},
                                                           {body_kind::text, "text"},
                                                           {body_kind::bytes, "bytes"}};

} // namespace

std::string_view to_string(body_kind kind) {
  return name_in(body_kind_names, kind, "bytes");
}

bool is_storable_text(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == '\0')
      return false;
    auto n = utf8_sequence(s, i);
    if (n == 0)
      return false;
    i += n;
  }
  return true;
}

body_kind classify_body(std::string_view body) {
  if (body.empty())
    return body_kind::empty;
  // jsonb_accepts implies storable text: its strings and raw bytes are checked, and a NUL
  // outside a string is a parse error.
  if (jsonb_accepts(body))
    return body_kind::json;
  return is_storable_text(body) ? body_kind::text : body_kind::bytes;
}

void store_body(attempt_columns& row, const std::string& body) {
  switch (classify_body(body)) {
  case body_kind::empty:
    break;
  case body_kind::json:
    row.response_payload_json = body;
    break;
  case body_kind::text:
    row.response_text = body;
    break;
  case body_kind::bytes:
    row.response_body = body;
    break;
  }
}

std::string readable_text(std::string_view bytes, std::size_t max_bytes) {
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  static constexpr std::string_view ellipsis = "\xE2\x80\xA6";
  std::string out;
  out.reserve(std::min(bytes.size(), max_bytes));
  for (std::size_t i = 0; i < bytes.size();) {
    std::size_t n = bytes[i] == '\0' ? 0 : utf8_sequence(bytes, i);
    std::string_view piece = n ? bytes.substr(i, n) : replacement;
    if (out.size() + piece.size() > max_bytes) {
      out += ellipsis;
      return out;
    }
    out += piece;
    i += n ? n : ill_formed_length(bytes, i);
  }
  return out;
}

std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    auto v = static_cast<unsigned char>(bytes[i]) << 16 |
             static_cast<unsigned char>(bytes[i + 1]) << 8 |
             static_cast<unsigned char>(bytes[i + 2]);
    out += alphabet[v >> 18 & 63];
    out += alphabet[v >> 12 & 63];
    out += alphabet[v >> 6 & 63];
    out += alphabet[v & 63];
  }
  if (i < bytes.size()) {
    auto v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size())
      v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += alphabet[v >> 18 & 63];
    out += alphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? alphabet[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

} // namespace outboxd::domain
