// Where a destination's answer body is kept so that any answer is stored as received: JSON that
// PostgreSQL's jsonb takes, else text when it is well-formed UTF-8, else raw bytes; and a
// readable rendering of arbitrary bytes for messages.
#pragma once

#include "domain/outbox.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace outboxd::domain {

/// The column an answer body goes to.
enum class body_kind {
  empty, // no body at all
  json,  // response_payload (jsonb)
  text,  // response_text: well-formed UTF-8 without NUL that jsonb would not take
  bytes, // response_body (bytea): anything else (invalid UTF-8, NUL bytes, binary)
};

/// The stored name: "empty", "json", "text", "bytes".
std::string_view to_string(body_kind kind);

/// Nesting deeper than this is kept as text rather than jsonb (PostgreSQL's JSON parser is
/// recursive and bounded by its stack).
inline constexpr int max_json_depth = 1000;

/// Where `body` is stored. json when it is one JSON value that jsonb accepts unchanged: strict
/// UTF-8, no `\u0000` escape, no lone surrogate escape, numbers within numeric's range (exponent
/// and length at most 1000), nesting at most max_json_depth. Otherwise text when
/// is_storable_text, otherwise bytes. Never throws.
body_kind classify_body(std::string_view body);

/// Puts `body` into the one column of `row` that classify_body chooses (none for an empty body).
void store_body(attempt_columns& row, const std::string& body);

/// True when `s` is well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or code points
/// above U+10FFFF) without a NUL byte: what a PostgreSQL text column in UTF8 accepts.
bool is_storable_text(std::string_view s);

/// `bytes` as storable text: every ill-formed sequence and every NUL becomes U+FFFD. When the
/// result would exceed `max_bytes`, it is cut on a character boundary and ends with "…".
std::string readable_text(std::string_view bytes, std::size_t max_bytes = std::string::npos);

/// Standard base64 (RFC 4648, with padding) of `bytes`.
std::string base64(std::string_view bytes);

} // namespace outboxd::domain
