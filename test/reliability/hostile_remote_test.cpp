// Hostile remotes: a real HTTP server in this test process plays inventory (with a revert) and
// fraud check for an outboxd whose OrderCreated fan-out is just those two. It answers what each
// test scripts: absurd Retry-After values, bodies that are not JSON, no answer at all, a
// connection cut mid-response, ids made to escape the revert URL. outboxd must clamp, record
// and carry on, and never call any other path.
#include "test/reliability/reliability.hpp"
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <deque>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <httplib.h>
#include <unistd.h>

using namespace outboxd::test;
using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

using reply = std::function<void(httplib::Response&)>;

reply status(int code, std::string body = "{}", std::string retry_after = "") {
  return [=](httplib::Response& res) {
    res.status = code;
    res.set_content(body, "application/json");
    if (!retry_after.empty())
      res.set_header("Retry-After", retry_after);
  };
}

/// An inventory and fraud check that answer from per-route scripts, then with a plain success.
class hostile_remote {
public:
  hostile_remote() : port(free_port()) {
    server_.set_tcp_nodelay(true);
    // Regular handlers (a pre-routing handler would leave request bodies unread).
    auto handle = [this](const httplib::Request& req, httplib::Response& res) {
      auto route = route_of(req);
      reply r;
      {
        std::lock_guard lock(mutex_);
        requests_.push_back({req.method + " " + req.target, steady_clock::now()});
        auto& queue = scripts_[route];
        if (!queue.empty()) {
          r = std::move(queue.front());
          queue.pop_front();
        }
      }
      if (r)
        r(res);
      else if (route == "reserve")
        status(200, R"({"reservationId":"RES-1"})")(res);
      else if (route == "stray")
        status(404, R"({"error":"no such path"})")(res);
      else
        status(200, R"({"riskScore":10})")(res);
    };
    server_.Get(".*", handle);
    server_.Post(".*", handle);
    server_.Put(".*", handle);
    server_.Delete(".*", handle);
    REQUIRE(server_.bind_to_port("127.0.0.1", port)); // connections queue until listen
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~hostile_remote() {
    server_.stop();
    thread_.join();
  }

  /// Replies for the next calls of a route: "reserve", "release" or "fraud".
  void script(const std::string& route, std::vector<reply> replies) {
    std::lock_guard lock(mutex_);
    scripts_[route].insert(scripts_[route].end(), replies.begin(), replies.end());
  }
  /// "METHOD target" of every request so far, in arrival order.
  std::vector<std::string> requests() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& r : requests_)
      out.push_back(r.first);
    return out;
  }
  /// Arrival times of the requests whose "METHOD target" starts with `prefix`.
  std::vector<steady_clock::time_point> arrivals(const std::string& prefix) {
    std::lock_guard lock(mutex_);
    std::vector<steady_clock::time_point> out;
    for (const auto& r : requests_)
      if (r.first.rfind(prefix, 0) == 0)
        out.push_back(r.second);
    return out;
  }
  /// Requests that went to neither inventory (reserve, release) nor fraud check.
  std::vector<std::string> strays() {
    std::vector<std::string> out;
    for (const auto& r : requests())
      if (!(r == "POST /inventory" || r == "POST /fraud" ||
            (r.rfind("DELETE /inventory/", 0) == 0 && r.size() > 26 &&
             r.compare(r.size() - 8, 8, "/release") == 0 && r.find('/', 18) == r.size() - 8)))
        out.push_back(r);
    return out;
  }

  const int port;

private:
  static std::string route_of(const httplib::Request& req) {
    if (req.method == "POST" && req.target == "/inventory")
      return "reserve";
    if (req.method == "POST" && req.target == "/fraud")
      return "fraud";
    if (req.method == "DELETE" && req.target.rfind("/inventory/", 0) == 0)
      return "release";
    return "stray";
  }

  httplib::Server server_;
  std::thread thread_;
  std::mutex mutex_;
  std::map<std::string, std::deque<reply>> scripts_;
  std::vector<std::pair<std::string, steady_clock::time_point>> requests_;
};

struct hostile_fixture {
  hostile_fixture()
      : config(write_config()),
        p("hostile", fresh_database("outboxd_reliability_hostile"),
          // Scripted runs of failures measure the backoff between retries and spend the retries:
          // the circuit breaker (its own tests are in test/e2e/destination_gates_test.cpp) must
          // not open on them, since its probes spend none.
          {"--config", config, "--set", "outbox.maxRetries=6", "--set", "dlq.maxRetries=1", "--set",
           "http.routes.inventory.circuitBreaker.enabled=false", "--set",
           "http.routes.fraudCheck.circuitBreaker.enabled=false"}) {
    p.wait_up();
  }
  ~hostile_fixture() { ::unlink(config.c_str()); }

  std::string write_config() {
    auto path = fmt::format("/tmp/outboxd-hostile-{}-{}.json", ::getpid(), remote.port);
    auto base = fmt::format("http://127.0.0.1:{}", remote.port);
    std::ofstream(path) << fmt::format(R"({{"http": {{
      "routes": {{
        "inventory": {{"url": "{0}/inventory", "timeout": "300ms",
                      "revert": {{"url": "{0}/inventory/{{reservationId}}/release", "method": "DELETE",
                                 "extract": {{"reservationId": "response:$.reservationId"}}}}}},
        "fraudCheck": {{"url": "{0}/fraud", "timeout": "300ms"}}
      }},
      "fanout": {{"OrderCreated": ["inventory", "fraudCheck"]}}
    }}}})",
                                       base);
    return path;
  }

  /// Creates an order and waits until it is CONFIRMED, FAILED or ATTENTION.
  std::pair<long long, std::string> run_order() {
    auto id = p.create_order();
    std::string status;
    wait_until(
        [&] {
          status = p.client().get("/api/orders/" + std::to_string(id)).str("/order/status");
          return status == "CONFIRMED" || status == "FAILED" || status == "ATTENTION";
        },
        30s);
    return {id, status};
  }

  /// One attempt of the order: "destination:outcome:status:error".
  std::vector<std::string> attempts(long long id) {
    auto t = p.timeline(id);
    std::vector<std::string> out;
    for (const auto& a : t.json["attempts"].GetArray())
      out.push_back(fmt::format("{}:{}:{}:{}", a["destination"].GetString(),
                                a["outcome"].GetString(),
                                a.HasMember("responseStatus") && a["responseStatus"].IsInt()
                                    ? a["responseStatus"].GetInt()
                                    : 0,
                                a.HasMember("errorMessage") && a["errorMessage"].IsString()
                                    ? a["errorMessage"].GetString()
                                    : ""));
    return out;
  }

  void check_healthy() {
    CHECK(p.process().running());
    CHECK(p.client().get("/healthz").status == 200);
    CHECK(remote.strays().empty());
  }

  hostile_remote remote;
  std::string config;
  outboxd_process p;
};

} // namespace

TEST_CASE_FIXTURE(hostile_fixture, "Retry-After: 999999999 is clamped to outbox.backoff.max") {
  remote.script("reserve", {status(503, "{}", "999999999")});
  auto [id, st] = run_order();
  CHECK(st == "CONFIRMED");
  auto at = remote.arrivals("POST /inventory");
  REQUIRE(at.size() == 2);
  CHECK(at[1] - at[0] < 3s); // backoff.max is 1s in the tests
  check_healthy();
}

TEST_CASE_FIXTURE(hostile_fixture, "garbage Retry-After values fall back to the backoff") {
  remote.script("reserve",
                {status(503, "{}", "soon"), status(503, "{}", "-5"), status(503, "{}", "1e309"),
                 status(503, "{}", "Wed, 99 Foo 2015 99:99:99 GMT"),
                 status(503, "{}", "99999999999999999999999999")});
  auto [id, st] = run_order();
  CHECK(st == "CONFIRMED");
  auto at = remote.arrivals("POST /inventory");
  REQUIRE(at.size() == 6);
  for (std::size_t i = 1; i < at.size(); ++i)
    CHECK(at[i] - at[i - 1] < 3s);
  check_healthy();
}

TEST_CASE_FIXTURE(hostile_fixture,
                  "a 200 whose body is not JSON is recorded as text, and the revert that needs an "
                  "id from it waits for an operator") {
  remote.script("reserve", {[](httplib::Response& res) {
                  res.status = 200;
                  res.set_content("<html>reserved, probably</html>", "text/html");
                }});
  remote.script("fraud", {status(400, R"({"error":"bad request"})")});
  auto [id, st] = run_order();
  CHECK(st == "ATTENTION");
  auto t = p.timeline(id);
  CHECK(t.body.find("<html>reserved, probably</html>") != std::string::npos);
  auto a = attempts(id);
  REQUIRE(a.size() >= 3);
  CHECK(a[0].rfind("inventory:success:200", 0) == 0);
  CHECK(a[1].rfind("fraudCheck:non_retryable:400", 0) == 0);
  CHECK(a[2].find("inventory.revert:non_retryable") == 0);
  CHECK(a[2].find("reservationId") != std::string::npos);
  CHECK(remote.arrivals("DELETE").empty()); // no release was sent to a made-up URL
  check_healthy();
}

TEST_CASE_FIXTURE(hostile_fixture,
                  "an endpoint that never answers times out; the order is compensated") {
  std::vector<reply> hang(7, [](httplib::Response& res) {
    std::this_thread::sleep_for(1500ms);
    status(200, R"({"riskScore":10})")(res);
  });
  remote.script("fraud", hang);
  auto [id, st] = run_order();
  CHECK(st == "FAILED");
  auto a = attempts(id);
  CHECK(std::count_if(a.begin(), a.end(), [](const std::string& x) {
          return x.rfind("fraudCheck:retryable:0:read failed or timed out", 0) == 0;
        }) == 7);
  CHECK(remote.requests().back() == "DELETE /inventory/RES-1/release");
  check_healthy();
}

TEST_CASE_FIXTURE(hostile_fixture, "a connection cut mid-response is retried") {
  remote.script("reserve", {[](httplib::Response& res) {
                  res.status = 200;
                  res.set_content_provider(
                      1000, "application/json",
                      [](std::size_t, std::size_t, httplib::DataSink& sink) {
                        sink.write(R"({"reservationId":)", 17);
                        return false; // the connection closes with 983 bytes missing
                      });
                }});
  auto [id, st] = run_order();
  CHECK(st == "CONFIRMED");
  auto a = attempts(id);
  REQUIRE(a.size() == 3);
  CHECK(a[0].rfind("inventory:retryable:0:", 0) == 0);
  CHECK(a[1].rfind("inventory:success:200", 0) == 0);
  check_healthy();
}

TEST_CASE_FIXTURE(hostile_fixture,
                  "an id made to escape the revert URL stays one percent-encoded path segment") {
  for (const auto& [id_value, encoded] : std::vector<std::pair<std::string, std::string>>{
           {R"(../../admin?x=\"y\"#z)", "..%2F..%2Fadmin%3Fx%3D%22y%22%23z"},
           {"..", "%2E%2E"},
           {"http:\\/\\/evil.example\\/x", "http%3A%2F%2Fevil.example%2Fx"}}) {
    CAPTURE(id_value);
    remote.script("reserve", {status(200, R"({"reservationId":")" + id_value + R"("})")});
    remote.script("fraud", {status(400, R"({"error":"bad request"})")});
    auto [id, st] = run_order();
    CHECK(st == "FAILED");
    CHECK(remote.requests().back() == "DELETE /inventory/" + encoded + "/release");
  }
  check_healthy();
}

TEST_CASE_FIXTURE(
    hostile_fixture,
    "a 10 KB id is not made into a revert URL; it is recorded and needs an operator") {
  remote.script("reserve",
                {status(200, R"({"reservationId":")" + std::string(10240, 'x') + R"("})")});
  remote.script("fraud", {status(400, R"({"error":"bad request"})")});
  auto [id, st] = run_order();
  CHECK(st == "ATTENTION");
  auto a = attempts(id);
  REQUIRE(a.size() >= 3);
  CHECK(a[2] == "inventory.revert:non_retryable:0:revert cannot be built: revert url placeholder "
                "{reservationId} is 10240 bytes long, over the 2048 a URL takes");
  // No request with a 10 KB URL went out.
  for (const auto& r : remote.requests())
    CHECK(r.size() < 4096);
  check_healthy();
}
