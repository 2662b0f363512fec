// The multi driver: many calls on one thread at once (counted at the server), each call keeping
// its own deadline and body cap, requests that cannot be made, and cancellation.
#include "client/multi_caller.hpp"
#include "test/client/loopback.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <sys/socket.h>
#include <thread>

using namespace outboxd::client;
using namespace outboxd::test;
using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

call_request get(const std::string& url, milliseconds timeout = 5s) {
  call_request r;
  r.method = "GET";
  r.url = url;
  r.timeout = timeout;
  return r;
}

/// Runs `m` until `done()` holds or 20 s passed (a safety bound, not an assertion on speed).
template <class Done> void drive(multi_caller& m, Done done) {
  auto give_up = steady_clock::now() + 20s;
  while (!done() && steady_clock::now() < give_up)
    m.run(50ms);
}

/// Requests being answered at once: each waits until `expected` have arrived (or 10 s), so the
/// peak is `expected` exactly when the client sent them all together.
class gathering {
public:
  explicit gathering(int expected) : expected_(expected) {}
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    ++now_;
    peak_ = std::max(peak_, now_);
    all_.notify_all();
    all_.wait_for(lock, 10s, [this] { return peak_ >= expected_; });
    --now_;
  }
  int peak() const {
    std::lock_guard lock(mutex_);
    return peak_;
  }

private:
  const int expected_;
  mutable std::mutex mutex_;
  std::condition_variable all_;
  int now_ = 0;
  int peak_ = 0;
};

} // namespace

TEST_CASE("many calls on one thread are in flight at the same time") {
  constexpr int calls = 40;
  gathering at_server(calls);
  raw_server server([&](int fd) {
    for (;;) {
      if (read_request(fd).empty())
        return;
      at_server.arrive_and_wait();
      if (!write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
        return;
    }
  });
  multi_caller m;
  std::vector<call_result> results;
  for (int i = 0; i < calls; ++i)
    m.start(get(server.url(fmt::format("/call/{}", i))),
            [&](call_result r) { results.push_back(std::move(r)); });
  CHECK(m.in_flight() == calls);
  drive(m, [&] { return results.size() == calls; });
  REQUIRE(results.size() == calls);
  CHECK(at_server.peak() == calls);
  for (const auto& r : results) {
    REQUIRE_MESSAGE(r.status, r.error);
    CHECK(*r.status == 200);
    CHECK(r.body == "{}");
  }
  CHECK(m.in_flight() == 0);
}

TEST_CASE("connections are kept between calls of one driver") {
  raw_server server([](int fd) {
    for (;;)
      if (read_request(fd).empty() ||
          !write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
        return;
  });
  multi_caller m;
  int answered = 0;
  for (int round = 0; round < 3; ++round) {
    m.start(get(server.url()), [&](call_result r) { answered += r.status ? 1 : 0; });
    drive(m, [&] { return answered == round + 1; });
  }
  CHECK(answered == 3);
  CHECK(server.accepted() == 1);
}

TEST_CASE("a call on a handle a finished call used carries nothing of that call") {
  // The driver keeps finished calls' handles for the next ones: a DELETE with a header, a body
  // and a small body cap must leave no method, header, body or cap to the POST after it.
  raw_server server([&server](int fd) {
    answer_and_remember(server, fd, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789");
  });
  multi_caller m;
  std::vector<call_result> results;
  call_request first;
  first.method = "DELETE";
  first.url = server.url("/first");
  first.headers = {{"X-First", "1"}};
  first.body = R"({"a":1})";
  first.max_response_bytes = 4;
  call_request second;
  second.method = "POST";
  second.url = server.url("/second");
  second.body = R"({"b":2})";
  for (const auto& request : {first, second}) {
    const auto expected = results.size() + 1;
    m.start(request, [&](call_result r) { results.push_back(std::move(r)); });
    drive(m, [&] { return results.size() == expected; });
  }
  REQUIRE(results.size() == 2);
  CHECK(results[0].truncated);
  CHECK(results[0].body == "0123");
  REQUIRE_MESSAGE(results[1].status, results[1].error);
  CHECK_FALSE(results[1].truncated);
  CHECK(results[1].body == "0123456789");
  auto seen = server.requests();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].rfind("DELETE /first HTTP/1.1\r\n", 0) == 0);
  CHECK(seen[1].rfind("POST /second HTTP/1.1\r\n", 0) == 0);
  CHECK(seen[1].find("X-First") == std::string::npos);
  CHECK(seen[1].find("\r\nContent-Length: 7\r\n") != std::string::npos);
  CHECK(seen[1].find(R"({"a":1})") == std::string::npos);
  CHECK(seen[1].substr(seen[1].size() - 7) == R"({"b":2})");
}

TEST_CASE("a kept connection the server then closes leaves the driver asleep; the next call "
          "connects again") {
  raw_server server([](int fd) { // one answer, then the connection is closed
    if (!read_request(fd).empty())
      write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
  });
  multi_caller m;
  int answered = 0;
  m.start(get(server.url()), [&](call_result r) { answered += r.status ? 1 : 0; });
  drive(m, [&] { return answered == 1; });
  REQUIRE(answered == 1);
  // Nothing in flight, the cached connection closed by the peer: each run() waits its whole
  // time. One that returned at once (a socket left in the wait set) would come back thousands
  // of times in this second.
  int returns = 0;
  for (auto until = steady_clock::now() + 1s; steady_clock::now() < until; ++returns)
    m.run(100ms);
  CHECK(returns <= 20);
  m.start(get(server.url()), [&](call_result r) { answered += r.status ? 1 : 0; });
  drive(m, [&] { return answered == 2; });
  CHECK(answered == 2);
  CHECK(server.accepted() == 2);
}

TEST_CASE("each call keeps its own deadline and body cap under the multi driver") {
  raw_server silent([](int fd) {
    read_request(fd);
    char b;
    ::recv(fd, &b, 1, 0); // until the client hangs up
  });
  raw_server huge([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10485760\r\n\r\n");
    std::string chunk(64 * 1024, 'a');
    for (int i = 0; i < 160 && write_all(fd, chunk); ++i) {
    }
  });
  raw_server quick([](int fd) {
    read_request(fd);
    write_all(fd, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}");
  });
  multi_caller m;
  std::map<std::string, call_result> results;
  auto keep = [&](std::string name) {
    return [&results, name](call_result r) { results[name] = std::move(r); };
  };
  m.start(get(silent.url(), 500ms), keep("silent"));
  auto capped = get(huge.url());
  capped.max_response_bytes = 1000;
  m.start(capped, keep("huge"));
  m.start(get(quick.url()), keep("quick"));
  drive(m, [&] { return results.size() == 3; });
  REQUIRE(results.size() == 3);

  const auto& s = results["silent"];
  CHECK_FALSE(s.status);
  CHECK_MESSAGE(s.error.find("timeout") != std::string::npos, s.error);
  CHECK(s.duration >= 450ms);

  const auto& h = results["huge"];
  REQUIRE_MESSAGE(h.status, h.error);
  CHECK(h.truncated);
  CHECK(h.body.size() == 1000);

  const auto& q = results["quick"];
  REQUIRE_MESSAGE(q.status, q.error);
  CHECK(*q.status == 201);
}

TEST_CASE("a request that cannot be made completes from run(), never from start()") {
  multi_caller m;
  std::optional<call_result> got;
  auto bad = get("ftp://example.invalid/x");
  m.start(bad, [&](call_result r) { got = std::move(r); });
  CHECK_FALSE(got);
  m.run(0ms);
  REQUIRE(got);
  CHECK_FALSE(got->status);
  CHECK(got->error == "not an http(s) URL: ftp://example.invalid/x");
}

TEST_CASE("cancel_all drops the calls in flight without completing them") {
  std::atomic<int> served{0};
  raw_server silent([&](int fd) {
    read_request(fd);
    ++served;
    char b;
    ::recv(fd, &b, 1, 0);
  });
  int completed = 0;
  {
    multi_caller m;
    for (int i = 0; i < 5; ++i)
      m.start(get(silent.url(), 10s), [&](call_result) { ++completed; });
    drive(m, [&] { return served == 5; });
    CHECK(served == 5);
    m.cancel_all();
    CHECK(m.in_flight() == 0);
    m.run(10ms);
    m.start(get(silent.url(), 10s), [&](call_result) { ++completed; });
  } // the destructor cancels the last one
  CHECK(completed == 0);
}
