// The HTTP client the engine calls destinations with: one keep-alive connection per
// scheme://host:port, TCP_NODELAY, per-call connect and read timeouts. Not thread-safe: each
// worker owns one.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace httplib {
class Client;
}

namespace outboxd::client {

/// One outgoing call.
struct call_request {
  std::string method; // GET POST PUT PATCH DELETE HEAD
  std::string url;    // absolute http(s) URL
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body; // sent as application/json when non-empty
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds read_timeout{5000};
};

/// How a call went: the answer, or the transport error.
struct call_result {
  std::optional<int> status; // nullopt: transport error (see error)
  std::string body;
  std::string content_type;
  bool truncated = false;
  std::string retry_after; // the Retry-After header, if any
  std::string error;       // transport error, e.g. "connection refused", "read timeout"
  std::chrono::milliseconds duration{0};
};

/// Keep-alive connections by origin; one per worker.
class caller {
public:
  caller();
  ~caller();
  caller(const caller&) = delete;
  caller& operator=(const caller&) = delete;

  /// Makes one call; never throws for network problems (they are in the result).
  call_result call(const call_request& request);

private:
  httplib::Client& client_for(const std::string& origin);
  std::map<std::string, std::unique_ptr<httplib::Client>> clients_;
};

} // namespace outboxd::client
