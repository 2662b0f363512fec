// What one outgoing call asks for and how it went: the contract between the engine and the
// client, independent of how the bytes travel.
#pragma once

#include "domain/routing.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outboxd::client {

/// One outgoing call.
struct call_request {
  std::string method; // GET POST PUT PATCH DELETE HEAD
  std::string url;    // absolute http(s) URL
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body; // sent as application/json (always for POST, PUT and PATCH)
  /// Bounds the connection set-up alone (inside `timeout`).
  std::chrono::milliseconds connect_timeout{2000};
  /// Bounds the whole call: connect, send and every byte of the answer.
  std::chrono::milliseconds timeout{5000};
  /// The answer's body is read up to this many bytes; the rest is not waited for.
  std::size_t max_response_bytes = 1 << 20;
  domain::tls_options tls;
};

/// How a call went: the answer, or the transport error.
struct call_result {
  std::optional<int> status; // nullopt: transport error (see error)
  std::string body;          // raw bytes, at most max_response_bytes of them
  bool truncated = false;    // the answer was longer than max_response_bytes; body is its start
  std::string content_type;
  std::string retry_after; // the Retry-After header, if any
  std::string error;       // transport error, e.g. "connection failed: ...", "... timeout ..."
  std::chrono::milliseconds duration{0};
};

/// The largest total size of an answer's header lines; beyond it the call is a transport error.
inline constexpr std::size_t max_response_header_bytes = 64 * 1024;

} // namespace outboxd::client
