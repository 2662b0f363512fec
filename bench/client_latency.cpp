// Per-call latency of the outgoing client on loopback keep-alive: outboxd's libcurl caller next
// to cpp-httplib's blocking Client (what the engine used before), against `outboxd simulator`.
// Usage: client_latency PORT [CALLS]; bench/client_latency.sh starts the simulator and runs it.
#include "client/caller.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <functional>
#include <httplib.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct summary {
  double median_us, p99_us, mean_us;
  int failures;
};

summary measure(int calls, const std::function<bool(int)>& call) {
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(calls));
  int failures = 0;
  for (int i = 0; i < calls; ++i) {
    auto start = clock_type::now();
    if (!call(i))
      ++failures;
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us)
    sum += v;
  return {us[us.size() / 2], us[us.size() * 99 / 100], sum / static_cast<double>(us.size()),
          failures};
}

std::string body(int i) {
  return fmt::format(R"({{"orderId":{},"customerId":"c-1","totalAmount":42.5}})", i + 1);
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: client_latency PORT [CALLS]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int calls = argc > 2 ? std::atoi(argv[2]) : 5000;
  const std::string path = "/api/fraud/check";
  const std::string url = fmt::format("http://127.0.0.1:{}{}", port, path);

  outboxd::client::caller curl_caller;
  auto with_curl = [&](int i) {
    outboxd::client::call_request r;
    r.method = "POST";
    r.url = url;
    r.headers = {{"Idempotency-Key", fmt::format("curl-{}-{}", ::getpid(), i)}};
    r.body = body(i);
    auto result = curl_caller.call(r);
    return result.status == 200;
  };

  httplib::Client old_client("127.0.0.1", port);
  old_client.set_tcp_nodelay(true);
  old_client.set_keep_alive(true);
  auto with_httplib = [&](int i) {
    httplib::Headers h{{"Idempotency-Key", fmt::format("httplib-{}-{}", ::getpid(), i)}};
    auto result = old_client.Post(path.c_str(), h, body(i), "application/json");
    return result && result->status == 200;
  };

  // Warm both (connections, caches), then alternate rounds so drift hits both alike.
  measure(200, with_curl);
  measure(200, with_httplib);
  std::vector<summary> curl_rounds, httplib_rounds;
  for (int round = 0; round < 2; ++round) {
    curl_rounds.push_back(measure(calls / 2, with_curl));
    httplib_rounds.push_back(measure(calls / 2, with_httplib));
  }
  auto print = [&](const char* name, const std::vector<summary>& rounds) {
    for (std::size_t i = 0; i < rounds.size(); ++i)
      fmt::print("{:8} round {}: median {:7.1f} us  p99 {:7.1f} us  mean {:7.1f} us  failures {}\n",
                 name, i + 1, rounds[i].median_us, rounds[i].p99_us, rounds[i].mean_us,
                 rounds[i].failures);
  };
  fmt::print("{} POST {} per client, keep-alive, one thread\n", calls, path);
  print("libcurl", curl_rounds);
  print("httplib", httplib_rounds);
  return 0;
}
