// The HTTP client the engine calls destinations with: libcurl, one easy handle per call, the
// connections (and DNS answers and TLS sessions) kept across calls for keep-alive. Not
// thread-safe: each worker owns one.
#pragma once

#include "client/call.hpp"

namespace outboxd::client {

/// Keep-alive connections shared by the calls of one worker.
class caller {
public:
  caller();
  ~caller();
  caller(const caller&) = delete;
  caller& operator=(const caller&) = delete;

  /// Makes one call and waits for it; never throws for network problems (they are in the
  /// result). The call takes at most `request.timeout` (plus scheduling noise).
  call_result call(const call_request& request);

private:
  void* share_; // CURLSH*: the connection cache every call of this caller uses
};

} // namespace outboxd::client
