// outboxd test processes: started with the binary under test (OUTBOXD_BINARY).
#include "test/support/outboxd_process.hpp"

#include "simulator/knobs.hpp"

#include <csignal>
#include <doctest/doctest.h>
#include <fmt/format.h>

namespace outboxd::test {

namespace {
const std::vector<std::string> test_defaults = {
    "--set", "outbox.backoff.base=50ms",  "--set", "outbox.backoff.max=1s",
    "--set", "dlq.backoff.base=50ms",     "--set", "dlq.backoff.max=1s",
    "--set", "outbox.pollInterval=500ms", "--set", "outbox.reaperInterval=1s",
    "--set", "outbox.shutdownTimeout=5s", "--set", "server.threads=16"};
}

outboxd_process::outboxd_process(std::string name, std::string conninfo,
                                 std::vector<std::string> extra,
                                 std::map<std::string, std::string> env)
    : name_(std::move(name)), conninfo_(std::move(conninfo)), extra_(std::move(extra)),
      env_(std::move(env)), port_(free_port()) {
  launch();
}

outboxd_process::~outboxd_process() = default;

void outboxd_process::launch() {
  std::vector<std::string> argv{OUTBOXD_BINARY, "serve"};
  argv.insert(argv.end(), test_defaults.begin(), test_defaults.end());
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  auto env = env_;
  env["DATABASE_URL"] = conninfo_;
  env["OUTBOXD_SERVER_PORT"] = std::to_string(port_);
  auto log = scratch_file(name_ + "-" + std::to_string(++launches_) + ".log");
  process_ = std::make_unique<child_process>(argv, env, log);
  client_ = std::make_unique<http_client>(port_);
}

void outboxd_process::wait_ready() {
  wait_up();
  // Every test starts from a quiet outside world: no random failures.
  quiet_world();
}

void outboxd_process::wait_up(std::chrono::milliseconds timeout) {
  bool ready = wait_until([&] { return client_->get("/readyz").status == 200; }, timeout);
  REQUIRE_MESSAGE(ready, output());
}

void outboxd_process::quiet_world() {
  knobs(every_knob(R"({"failureRate":0,"lateRate":0})"));
}

void outboxd_process::knobs(const std::string& services_json) {
  auto& target = simulator_ ? *simulator_ : *client_;
  auto r = target.put("/api/simulator/config", R"({"services":)" + services_json + "}");
  REQUIRE_MESSAGE(r.status == 200, r.body);
}

long long outboxd_process::create_order(const std::string& shipping, const std::string& amount) {
  auto r = client_->post("/api/orders", R"({"customerId":"C-1","totalAmount":)" + amount +
                                            R"(,"shippingType":")" + shipping + R"("})");
  REQUIRE_MESSAGE(r.status == 201, r.body);
  return r.num("/id");
}

std::string outboxd_process::wait_status(long long id, const std::string& status,
                                         std::chrono::milliseconds timeout) {
  std::string last;
  wait_until(
      [&] {
        last = client_->get("/api/orders/" + std::to_string(id)).str("/order/status");
        return last == status;
      },
      timeout);
  return last;
}

http_response outboxd_process::ledger(long long id) {
  auto& target = simulator_ ? *simulator_ : *client_;
  return target.get("/api/simulator/ledger?aggregateId=" + std::to_string(id));
}

http_response outboxd_process::timeline(long long id) {
  return client_->get("/api/orders/" + std::to_string(id));
}

std::optional<int> outboxd_process::stop() {
  process_->signal(SIGTERM);
  return process_->wait_exit(std::chrono::seconds(20));
}

void outboxd_process::restart() {
  process_->wait_exit(std::chrono::seconds(20));
  launch();
}

simulator_process::simulator_process()
    : port(free_port()), process({OUTBOXD_BINARY, "simulator", "--port", std::to_string(port)}, {},
                                 scratch_file("simulator-" + std::to_string(port) + ".log")) {
  http_client c(port);
  REQUIRE(wait_until([&] { return c.get("/healthz").status == 200; }, std::chrono::seconds(10)));
}

std::vector<std::string>
simulator_process::outboxd_args(std::initializer_list<const char*> settings) const {
  std::vector<std::string> args{"--set", "simulator.enabled=false", "--set",
                                "simulator.baseUrl=http://127.0.0.1:" + std::to_string(port)};
  for (const auto* setting : settings) {
    args.emplace_back("--set");
    args.emplace_back(setting);
  }
  return args;
}

std::string every_knob(const std::string& fields) {
  std::string services;
  for (auto knob : simulator::knob_names)
    services += fmt::format(R"({}"{}":{})", services.empty() ? "" : ",", knob, fields);
  return "{" + services + "}";
}

std::vector<const rapidjson::Value*> ledger_entries(const http_response& ledger,
                                                    const std::string& operation) {
  std::vector<const rapidjson::Value*> out;
  if (!ledger.json.IsObject() || !ledger.json.HasMember("entries"))
    return out;
  for (const auto& e : ledger.json["entries"].GetArray())
    if (e["operation"].GetString() == operation)
      out.push_back(&e);
  return out;
}

} // namespace outboxd::test
