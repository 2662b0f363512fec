// Held log lines: a thread's lines wait while a holder lives and go out together, in order, when
// it writes them or ends; without a holder every line goes out at once.
#include "log/log.hpp"

#include <cstdio>
#include <doctest/doctest.h>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

using namespace outboxd;

namespace {

/// Sends stderr (where text lines go), or stdout (JSON records), to a file for the test's life;
/// text() reads what arrived.
class captured_output {
public:
  explicit captured_output(log::format f = log::format::text)
      : fd_(f == log::format::json ? 1 : 2) {
    flush();
    saved_ = ::dup(fd_);
    std::FILE* file = std::fopen(path_.c_str(), "w");
    REQUIRE(file);
    ::dup2(::fileno(file), fd_);
    std::fclose(file);
    log::configure(log::level::info, f);
  }
  ~captured_output() {
    flush();
    ::dup2(saved_, fd_);
    ::close(saved_);
    std::remove(path_.c_str());
    log::configure(log::level::info, log::format::text);
  }
  void flush() const { std::fflush(fd_ == 1 ? stdout : stderr); }
  std::string text() const {
    flush();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

private:
  int fd_;
  std::string path_ = "/tmp/outboxd-log-test-" + std::to_string(::getpid()) + ".txt";
  int saved_ = -1;
};

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("log: without a holder a line is written at once") {
  captured_output err;
  log::info("processor-1", "event {} processed", 7);
  CHECK(count(err.text(), "INFO  [processor-1] event 7 processed\n") == 1);
}

TEST_CASE("log: a line below the configured level is not written, whoever chose its level") {
  captured_output err; // at info
  log::write(log::level::debug, "processor-1", "held back again");
  log::debug("processor-1", "held back {}", "again");
  log::write(log::level::info, "processor-1", "held back first");
  auto text = err.text();
  CHECK(count(text, "DEBUG") == 0);
  CHECK(count(text, "INFO  [processor-1] held back first\n") == 1);
}

TEST_CASE("log: a text line stays one line whatever its message holds") {
  captured_output err;
  // a forged line in a request's path, a library's multi-line error, terminal controls
  log::info("http", "POST /api/orders/1\n2026-12-04T14:22:30.000Z ERROR [dlq-processor-1] forged");
  log::warn("db", "connection refused\n\tIs the server running?\n");
  log::info("api",
            "customer \x1b[2J\r\x7f \xc2\x85 \xe2\x80\xa8 \xe2\x80\xae \xe2\x81\xa9 caf\xc3\xa9");
  auto text = err.text();
  CHECK(count(text, "\n") == 3);
  CHECK(count(text, "] POST /api/orders/1\\n2026-12-04T14:22:30.000Z ERROR [dlq-processor-1] "
                    "forged\n") == 1);
  CHECK(count(text, "] connection refused\\n\\tIs the server running?\n") == 1);
  CHECK(count(text, "] customer \\x1b[2J\\r\\x7f \\u0085 \\u2028 \\u202e \\u2069 caf\xc3\xa9\n") ==
        1);
}

TEST_CASE("log: a JSON record holds its message without the line break a library ended it with") {
  captured_output out(log::format::json);
  log::warn("db", "connection refused\n\tIs the server running?\n");
  CHECK(count(out.text(), R"("msg":"connection refused\n\tIs the server running?"})") == 1);
}

TEST_CASE("log: a holder keeps its thread's lines until write_held or its end, in order") {
  captured_output err;
  {
    log::holder held;
    log::info("processor-1", "first");
    log::warn("processor-1", "second");
    CHECK(err.text().empty());
    log::write_held();
    auto text = err.text();
    CHECK(count(text, "[processor-1] first\n") == 1);
    CHECK(text.find("first") < text.find("second"));
    log::info("processor-1", "third");
    CHECK(count(err.text(), "third") == 0);
    {
      log::holder nested; // ends without writing: the outer holder still holds
      log::info("processor-1", "fourth");
    }
    CHECK(count(err.text(), "fourth") == 0);
  }
  auto text = err.text();
  CHECK(count(text, "third") == 1);
  CHECK(count(text, "fourth") == 1);
  CHECK(text.find("third") < text.find("fourth"));
  log::write_held(); // nothing held any more: nothing written twice
  CHECK(err.text() == text);
}

TEST_CASE("log: a holder holds only its own thread's lines, and at most 32 KB of them") {
  captured_output err;
  log::holder held;
  std::thread other([] { log::info("janitor", "not held"); });
  other.join();
  CHECK(count(err.text(), "not held") == 1);
  const std::string long_text(1000, 'x');
  for (int i = 0; i < 40; ++i)
    log::info("processor-1", "{} {}", i, long_text);
  // Past 32 KB the held lines went out; what followed is still held.
  auto text = err.text();
  CHECK(count(text, long_text) >= 30);
  CHECK(count(text, long_text) < 40);
  log::write_held();
  CHECK(count(err.text(), long_text) == 40);
}
