// Where one HTTP/1.1 request ends in the bytes received so far: the header block, then a body
// framed by Content-Length or chunked transfer coding. What lets the connection gate hold a
// connection until its whole request is there, without a thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace outboxd::http {

struct request_frame {
  enum class kind {
    incomplete,        ///< more bytes are needed
    complete,          ///< the request is the first `length` bytes
    headers_too_large, ///< no end of the header block within the limit
    body_too_large,    ///< the body is declared (or grows) larger than the limit
    malformed,         ///< framing that cannot be trusted (bad or conflicting lengths)
  };
  kind what = kind::incomplete;
  std::size_t length = 0;
  bool expects_continue = false; ///< `Expect: 100-continue` with a body still to come
};

/// Frames the request at the start of `bytes`. A request with neither Content-Length nor
/// Transfer-Encoding has no body. Two different Content-Lengths, Content-Length together with
/// Transfer-Encoding, or a Transfer-Encoding other than one `chunked` are malformed (the ways to
/// smuggle a second request past a proxy).
request_frame frame_request(std::string_view bytes, std::size_t max_header_bytes,
                            std::size_t max_body_bytes);

/// The header block (request line to the empty line) of the whole request `request` rewritten so
/// that the library reads each field as it was sent, or nullopt where it does already. The library
/// percent-decodes field values (all but Location's), so `Idempotency-Key: %61bc` read as `abc`
/// and `Bearer%20t` as a token: each '%' goes to it as "%25". It also drops a field whose value is
/// empty, and an empty Idempotency-Key would read as none (a create without replay protection):
/// that one goes as "%00", a NUL, which no client can send (a NUL in a field is malformed) and
/// the key's check refuses.
std::optional<std::string> head_as_sent(std::string_view request);

} // namespace outboxd::http
