// Where a request ends: the header block, Content-Length and chunked bodies, and the framings a
// server must refuse.
#include "http/request_framing.hpp"

#include <doctest/doctest.h>
#include <string>

using outboxd::http::frame_request;
using kind = outboxd::http::request_frame::kind;

namespace {
constexpr std::size_t header_limit = 1024;
constexpr std::size_t body_limit = 100;

outboxd::http::request_frame frame(const std::string& bytes) {
  return frame_request(bytes, header_limit, body_limit);
}
} // namespace

TEST_CASE("a request without a body ends after its header block; pipelined bytes stay outside") {
  std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(frame(get).what == kind::complete);
  CHECK(frame(get).length == get.size());
  CHECK(frame(get + get).length == get.size());
  for (std::size_t cut = 0; cut < get.size(); ++cut)
    CHECK(frame(get.substr(0, cut)).what == kind::incomplete);
}

TEST_CASE("Content-Length frames the body, up to the limit") {
  std::string head = "POST /x HTTP/1.1\r\ncontent-length:  5 \r\n\r\n";
  CHECK(frame(head + "abc").what == kind::incomplete);
  CHECK(frame(head + "abcde").what == kind::complete);
  CHECK(frame(head + "abcdeGET").length == head.size() + 5);
  CHECK(frame("POST /x HTTP/1.1\r\nContent-Length: 101\r\n\r\n").what == kind::body_too_large);
  CHECK(frame("POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\n").what == kind::incomplete);
}

TEST_CASE("chunked bodies end at the last chunk and its trailers") {
  std::string head = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  std::string body = "5;ext=1\r\nhello\r\n3\r\n, w\r\n0\r\n\r\n";
  CHECK(frame(head + body).what == kind::complete);
  CHECK(frame(head + body).length == head.size() + body.size());
  for (std::size_t cut = 0; cut < body.size(); ++cut)
    CHECK(frame(head + body.substr(0, cut)).what == kind::incomplete);
  std::string trailers = "0\r\nX-Sum: 1\r\n\r\n";
  CHECK(frame(head + trailers).length == head.size() + trailers.size());
  CHECK(frame(head + "65\r\n").what == kind::body_too_large); // 101 bytes declared
  CHECK(frame(head + "zz\r\n").what == kind::malformed);
  CHECK(frame(head + "3\r\nabcX\r\n").what == kind::malformed); // no CRLF after the data
}

TEST_CASE("framings that could smuggle a request are malformed") {
  CHECK(frame("POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n").what ==
        kind::malformed);
  CHECK(frame("POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n").what ==
        kind::malformed);
  CHECK(frame("POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n").what == kind::malformed);
  // Chunked alone, in one field, as the library reads it; a list or a second field could be read
  // as chunked here and as a plain body there.
  const std::string chunk = "\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
  for (const char* te : {"Transfer-Encoding: gzip, chunked", "Transfer-Encoding: chunked, chunked",
                         "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked",
                         "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked"}) {
    CAPTURE(te);
    CHECK(frame(std::string("POST /x HTTP/1.1\r\n") + te + chunk).what == kind::malformed);
  }
  CHECK(frame("POST /x HTTP/1.1\r\nTransfer-Encoding: CHUNKED " + chunk).what == kind::complete);
  CHECK(frame("POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n").what == kind::malformed);
  CHECK(frame("POST /x HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n").what == kind::malformed);
  // Header lines that are not "name: value" with a token for a name: a proxy and the library
  // would disagree on them (the library skips them, or reads "Content-Length " as another name).
  for (const char* line : {"Content-Length : 5", "Content-Length\t: 5", "X-A a", ": 5",
                           " folded: 1", "\tContent-Length: 5", "Conte\x01nt-Length: 5"}) {
    CAPTURE(line);
    CHECK(frame(std::string("POST /x HTTP/1.1\r\nHost: x\r\n") + line + "\r\n\r\nhello").what ==
          kind::malformed);
  }
  CHECK(frame("POST /x HTTP/1.1\r\nX-Odd_Name.1~!: a:b\r\nContent-Length: 1\r\n\r\nA").what ==
        kind::complete);
  // The same length twice is one length.
  CHECK(frame("POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nA").what ==
        kind::complete);
}

TEST_CASE("field values with a NUL or another control, and a second Host, are malformed") {
  using namespace std::string_literals;
  for (const auto& line : {"Authorization: Bearer abc\0junk"s, "X-A: a\rb"s, "X-A: a\x01"s,
                           "X-A: \x7f"s, "Host: other"s}) {
    CAPTURE(line);
    CHECK(frame("GET /x HTTP/1.1\r\nHost: x\r\n" + line + "\r\n\r\n").what == kind::malformed);
  }
  // Tabs, spaces and bytes beyond ASCII (UTF-8 text, obs-text) are a value's own.
  CHECK(frame("GET /x HTTP/1.1\r\nHost: x\r\nX-A: a\tb c \xc3\xa9\xff\r\n\r\n").what ==
        kind::complete);
}

TEST_CASE("a header block beyond the limit is refused without waiting for its end") {
  CHECK(frame("GET / HTTP/1.1\r\nX: " + std::string(header_limit, 'a')).what ==
        kind::headers_too_large);
}

TEST_CASE("Expect: 100-continue is reported while the body is awaited") {
  std::string head = "POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  CHECK(frame(head).expects_continue);
  CHECK_FALSE(frame(head + "ab").expects_continue);
}

TEST_CASE("the header block goes to the library as sent: '%' escaped, an empty key kept") {
  using outboxd::http::head_as_sent;
  // Nothing the library would change: no copy.
  CHECK_FALSE(head_as_sent("GET /a%20b HTTP/1.1\r\nHost: x\r\n\r\n"));
  CHECK_FALSE(head_as_sent("GET / HTTP/1.0\r\n\r\n"));
  const std::string body = "{\"a\": \"50%\"}";
  auto head = head_as_sent("POST /o%41 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %61bc\r\n"
                           "Authorization: Bearer%20t\r\nLocation: /%41\r\n\r\n" +
                           body);
  REQUIRE(head);
  // The request line and Location (which the library does not decode) stay as they were.
  CHECK(*head == "POST /o%41 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %2561bc\r\n"
                 "Authorization: Bearer%2520t\r\nLocation: /%41\r\n\r\n");
  for (const char* empty : {"Idempotency-Key:", "idempotency-key:   ", "Idempotency-Key:\t"}) {
    CAPTURE(empty);
    auto kept = head_as_sent(std::string("POST / HTTP/1.1\r\n") + empty + "\r\nHost: x\r\n\r\n");
    REQUIRE(kept);
    CHECK(kept->find(": %00\r\nHost: x\r\n\r\n") != std::string::npos);
  }
  // Other empty fields are the library's to drop (an empty one means none).
  CHECK_FALSE(head_as_sent("GET / HTTP/1.1\r\nHost: x\r\nAccept:\r\n\r\n"));
}
