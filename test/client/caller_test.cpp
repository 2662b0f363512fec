// The outgoing client against real loopback servers that misbehave: a deadline for the whole
// call, a cap on the body (truncated, status kept), a cap on the headers, cut connections, empty
// answers, keep-alive reuse and the exact request bytes.
#include "client/caller.hpp"
#include "domain/delivery.hpp"
#include "test/client/loopback.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <regex>
#include <sys/socket.h>
#include <thread>

using namespace outboxd::client;
using namespace outboxd::test;
using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

call_request get(const std::string& url, milliseconds timeout = 2s) {
  call_request r;
  r.method = "GET";
  r.url = url;
  r.timeout = timeout;
  return r;
}

/// A script that reads requests and answers each with `response`, keeping the connection.
raw_server::script answer_each(std::string response) {
  return [response](int fd) {
    for (;;) {
      if (read_request(fd).empty() || !write_all(fd, response))
        return;
    }
  };
}

/// Keeps writing `piece` every `every` until the peer is gone or `limit` passes.
void trickle(int fd, const std::string& piece, milliseconds every, milliseconds limit = 20s) {
  auto end = steady_clock::now() + limit;
  while (steady_clock::now() < end && write_all(fd, piece))
    std::this_thread::sleep_for(every);
}

} // namespace

namespace {
/// Whether a compensation takes `error` for a call that never left (domain::never_sent_errors).
bool never_sent(const std::string& error) {
  return std::regex_search(error,
                           std::regex(outboxd::domain::never_sent_errors, std::regex::extended));
}
} // namespace

TEST_CASE("a server that trickles its answer is cut at the call's deadline, as a timeout") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
    trickle(fd, "x", 100ms); // a byte now and then resets any per-read timeout
  });
  caller c;
  auto r = c.call(get(server.url(), 800ms));
  CHECK_FALSE(r.status);
  CHECK_MESSAGE(r.error.find("timeout") != std::string::npos, r.error);
  CHECK(r.error.rfind("read failed or timed out", 0) == 0);
  CHECK(r.duration >= 750ms);
  CHECK(r.duration < 800ms + 700ms);
  CHECK(r.body.empty());
}

TEST_CASE("a trickling header section is cut at the deadline as well") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\n");
    trickle(fd, "X-Slow: 1\r\n", 100ms);
  });
  caller c;
  auto r = c.call(get(server.url(), 600ms));
  CHECK_FALSE(r.status);
  CHECK_MESSAGE(r.error.find("timeout") != std::string::npos, r.error);
  CHECK(r.duration < 600ms + 700ms);
}

TEST_CASE("a silent server on a reused connection is a read timeout, not a connect timeout") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    read_request(fd); // the second request is never answered
    char b;
    ::recv(fd, &b, 1, 0);
  });
  caller c;
  auto first = c.call(get(server.url(), 500ms));
  REQUIRE_MESSAGE(first.status, first.error);
  auto second = c.call(get(server.url(), 500ms));
  CHECK_FALSE(second.status);
  CHECK_MESSAGE(second.error.rfind("read failed or timed out: timeout", 0) == 0, second.error);
  CHECK_FALSE(never_sent(second.error)); // the request went out: the partner may have applied it
  CHECK(server.accepted() == 1);
}

TEST_CASE("a server that never answers is cut at the deadline") {
  raw_server server([](int fd) {
    read_request(fd);
    char b;
    ::recv(fd, &b, 1, 0); // until the client hangs up
  });
  caller c;
  auto started = steady_clock::now();
  auto r = c.call(get(server.url(), 500ms));
  CHECK_FALSE(r.status);
  CHECK_MESSAGE(r.error.find("timeout") != std::string::npos, r.error);
  CHECK(steady_clock::now() - started < 500ms + 700ms);
}

TEST_CASE("a 10 MB answer is cut at maxResponseBytes, keeping its status and headers") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                  "Retry-After: 7\r\nContent-Length: 10485760\r\n\r\n");
    std::string chunk(64 * 1024, 'a');
    for (int i = 0; i < 160 && write_all(fd, chunk); ++i) {
    }
  });
  caller c;
  auto request = get(server.url());
  request.max_response_bytes = 1 << 20;
  auto r = c.call(request);
  REQUIRE_MESSAGE(r.status, r.error);
  CHECK(*r.status == 503);
  CHECK(r.truncated);
  CHECK(r.body.size() == std::size_t{1} << 20);
  CHECK(r.body.find_first_not_of('a') == std::string::npos);
  CHECK(r.content_type == "application/json");
  CHECK(r.retry_after == "7");
  CHECK(r.error.empty());
}

TEST_CASE("a chunked answer without an end is cut at maxResponseBytes") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    std::string chunk = fmt::format("{:x}\r\n{}\r\n", 1000, std::string(1000, 'b'));
    trickle(fd, chunk, 0ms, 10s);
  });
  caller c;
  auto request = get(server.url());
  request.max_response_bytes = 100000;
  auto r = c.call(request);
  REQUIRE_MESSAGE(r.status, r.error);
  CHECK(*r.status == 200);
  CHECK(r.truncated);
  CHECK(r.body.size() == 100000);
  CHECK(r.duration < 2s);
}

TEST_CASE("an answer of exactly maxResponseBytes is whole, one byte more is truncated") {
  for (std::size_t extra : {0, 1}) {
    CAPTURE(extra);
    std::string body(1000 + extra, 'c');
    raw_server server(answer_each(
        fmt::format("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{}", body.size(), body)));
    caller c;
    auto request = get(server.url());
    request.max_response_bytes = 1000;
    auto r = c.call(request);
    REQUIRE_MESSAGE(r.status, r.error);
    CHECK(r.truncated == (extra == 1));
    CHECK(r.body == body.substr(0, 1000));
  }
}

TEST_CASE("response headers beyond 64 KiB are a transport error") {
  raw_server server([](int fd) {
    read_request(fd);
    std::string head = "HTTP/1.1 200 OK\r\n";
    for (int i = 0; i < 100; ++i)
      head += fmt::format("X-Filler-{}: {}\r\n", i, std::string(1000, 'h'));
    write_all(fd, head + "Content-Length: 2\r\n\r\n{}");
  });
  caller c;
  auto r = c.call(get(server.url()));
  CHECK_FALSE(r.status);
  CHECK(r.error == "response headers too large (over 65536 bytes)");
}

TEST_CASE("one header line longer than curl takes is named as headers too large") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nX-Big: " + std::string(1 << 20, 'a') +
                      "\r\nContent-Length: 2\r\n\r\n{}");
  });
  caller c;
  auto r = c.call(get(server.url()));
  CHECK_FALSE(r.status);
  CHECK(r.error == "response headers too large (a header line over 100 KB)");
}

TEST_CASE("two Content-Length headers that disagree are a transport error") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\n" +
                      std::string(50, 'x'));
  });
  caller c;
  auto r = c.call(get(server.url()));
  CHECK_FALSE(r.status);
  CHECK(r.error == "read failed: the answer has two Content-Length headers that disagree");
  // The same length twice is only redundant.
  raw_server twice(
      answer_each("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}"));
  caller c2; // gone before `twice`, which serves its keep-alive connection until it closes
  auto ok = c2.call(get(twice.url()));
  CHECK(ok.status == 200);
  CHECK(ok.body == "{}");
}

TEST_CASE("a chunked answer's trailer sets neither its content type nor its Retry-After") {
  raw_server server(answer_each("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n4\r\nbusy\r\n0\r\n"
                                "Retry-After: 0\r\nContent-Type: text/evil\r\n\r\n"));
  caller c;
  auto r = c.call(get(server.url()));
  REQUIRE(r.status == 503);
  CHECK(r.body == "busy");
  CHECK(r.content_type == "text/plain");
  CHECK(r.retry_after.empty());
}

TEST_CASE("a connection closed mid-body is a transport error, not a short success") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"partial\":");
  });
  caller c;
  auto r = c.call(get(server.url()));
  CHECK_FALSE(r.status);
  CHECK_MESSAGE(r.error.rfind("read failed", 0) == 0, r.error);
  CHECK(r.body.empty());
}

TEST_CASE("a connection closed before any answer is a transport error") {
  raw_server server([](int fd) { read_request(fd); });
  caller c;
  auto r = c.call(get(server.url()));
  CHECK_FALSE(r.status);
  CHECK_MESSAGE(r.error.rfind("read failed", 0) == 0, r.error);
}

TEST_CASE("empty answers: 204, and 200 with Content-Length 0") {
  for (const char* answer :
       {"HTTP/1.1 204 No Content\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"}) {
    CAPTURE(answer);
    raw_server server(answer_each(answer));
    caller c;
    auto r = c.call(get(server.url()));
    REQUIRE_MESSAGE(r.status, r.error);
    CHECK((*r.status == 204 || *r.status == 200));
    CHECK(r.body.empty());
    CHECK_FALSE(r.truncated);
  }
}

TEST_CASE("two calls to one origin share one keep-alive connection") {
  raw_server server(answer_each("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"));
  caller c;
  for (int i = 0; i < 3; ++i) {
    auto r = c.call(get(server.url("/n/" + std::to_string(i))));
    REQUIRE_MESSAGE(r.status, r.error);
    CHECK(*r.status == 200);
    CHECK(r.body == "{}");
  }
  CHECK(server.accepted() == 1);
}

TEST_CASE("a connection the server closed after an answer is replaced for the next call") {
  raw_server server([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
  });
  caller c;
  for (int i = 0; i < 2; ++i) {
    auto r = c.call(get(server.url()));
    REQUIRE_MESSAGE(r.status, r.error);
    CHECK(*r.status == 200);
  }
  CHECK(server.accepted() == 2);
}

TEST_CASE("a POST sends the body as JSON with the given headers, and no Expect") {
  // The server is only called once it is constructed: capturing it in its own script is safe.
  raw_server server([&server](int fd) {
    server.remember(read_request(fd));
    write_all(fd, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: "
                  "11\r\n\r\n{\"id\":\"A\"}\n");
  });
  caller c;
  call_request r;
  r.method = "POST";
  r.url = server.url("/api/x%2Fy?q=1");
  r.headers = {{"Idempotency-Key", "7:billing"}, {"X-Empty", ""}};
  r.body = std::string(5000, '1'); // large enough for curl's 100-continue, were it not off
  auto result = c.call(r);
  REQUIRE_MESSAGE(result.status, result.error);
  CHECK(*result.status == 201);
  CHECK(result.body == "{\"id\":\"A\"}\n");
  CHECK(result.content_type == "application/json");
  auto seen = server.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].rfind("POST /api/x%2Fy?q=1 HTTP/1.1\r\n", 0) == 0);
  CHECK(seen[0].find("\r\nIdempotency-Key: 7:billing\r\n") != std::string::npos);
  CHECK(seen[0].find("\r\nX-Empty:") != std::string::npos);
  CHECK(seen[0].find("\r\nContent-Type: application/json\r\n") != std::string::npos);
  CHECK(seen[0].find("\r\nContent-Length: 5000\r\n") != std::string::npos);
  CHECK(seen[0].find("Expect") == std::string::npos);
  CHECK(seen[0].substr(seen[0].size() - 5000) == r.body);
  CHECK(result.duration < 1s);
}

TEST_CASE("methods: PUT, PATCH and DELETE with a body, DELETE and HEAD without") {
  raw_server server([&server](int fd) {
    answer_and_remember(server, fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  });
  caller c;
  for (auto [method, body] :
       std::vector<std::pair<std::string, std::string>>{{"PUT", "{\"a\":1}"},
                                                        {"PATCH", "{}"},
                                                        {"DELETE", "{\"b\":2}"},
                                                        {"DELETE", ""},
                                                        {"HEAD", ""}}) {
    call_request r;
    r.method = method;
    r.url = server.url("/m");
    r.body = body;
    auto result = c.call(r);
    CHECK_MESSAGE(result.status, method << ": " << result.error);
  }
  auto seen = server.requests();
  REQUIRE(seen.size() == 5);
  CHECK(seen[0].rfind("PUT /m ", 0) == 0);
  CHECK(seen[0].find("{\"a\":1}") != std::string::npos);
  CHECK(seen[1].rfind("PATCH /m ", 0) == 0);
  CHECK(seen[2].rfind("DELETE /m ", 0) == 0);
  CHECK(seen[2].find("{\"b\":2}") != std::string::npos);
  CHECK(seen[3].rfind("DELETE /m ", 0) == 0);
  CHECK(seen[3].find("Content-Type") == std::string::npos);
  CHECK(seen[4].rfind("HEAD /m ", 0) == 0);
}

TEST_CASE("refused connections, bad URLs and unknown methods are transport errors") {
  caller c;
  int closed_port = 0;
  {
    raw_server gone([](int) {});
    closed_port = gone.port();
  }
  auto r = c.call(get(fmt::format("http://127.0.0.1:{}/", closed_port)));
  CHECK_FALSE(r.status);
  CHECK_MESSAGE(r.error.rfind("connection failed", 0) == 0, r.error);
  CHECK(never_sent(r.error)); // a compensation need not re-send it to know

  r = c.call(get("/relative/path"));
  CHECK_FALSE(r.status);
  CHECK(r.error == "not an absolute URL: /relative/path");

  r = c.call(get("ftp://127.0.0.1/x"));
  CHECK_FALSE(r.status);
  CHECK(r.error == "not an http(s) URL: ftp://127.0.0.1/x");

  auto request = get("http://127.0.0.1:1/");
  request.method = "BREW";
  r = c.call(request);
  CHECK_FALSE(r.status);
  CHECK(r.error == "unsupported method BREW");
}
