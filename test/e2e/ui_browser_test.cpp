// The web UI in a real browser: a real outboxd on a fresh database, orders made through the API
// (an XSS customer, a billing failure that is compensated), then test/browser/ui.test.mjs drives
// Debian's chromium through playwright-core against the page; fanout.test.mjs does the same for
// an outboxd with another http.fanout.
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <sstream>

using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

/// The absolute path of `program` on PATH, or "" (child_process execs without a PATH search).
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    auto candidate = std::filesystem::path(dir.empty() ? "." : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate.string();
  }
  return {};
}

std::filesystem::path browser_dir() {
  return std::filesystem::path(OUTBOXD_SOURCE_DIR) / "test" / "browser";
}

/// Node, or a failed test naming what to install: a skipped browser test would hide an untested UI.
std::string browser_tools() {
  REQUIRE_MESSAGE(::access("/usr/bin/chromium", X_OK) == 0,
                  "/usr/bin/chromium not found: run scripts/install-deps.sh (Debian package "
                  "chromium)");
  auto node = find_on_path("node");
  REQUIRE_MESSAGE(!node.empty(),
                  "node not found on PATH: run scripts/install-deps.sh (packages nodejs, npm)");
  REQUIRE_MESSAGE(std::filesystem::exists(browser_dir() / "node_modules" / "playwright-core"),
                  "playwright-core is not installed: run npm ci --prefix test/browser "
                  "(scripts/test.sh does)");
  return node;
}

/// Runs test/browser/<script> against `p` (with `extra` arguments) and checks that it passed.
void run_browser_script(const std::string& script, outboxd_process& p,
                        const std::vector<std::string>& extra = {}) {
  auto node = browser_tools();
  auto log = scratch_file(script + ".log");
  std::vector<std::string> args = {node, (browser_dir() / script).string(),
                                   "http://127.0.0.1:" + std::to_string(p.port())};
  args.insert(args.end(), extra.begin(), extra.end());
  child_process run(args, {}, log);
  auto code = run.wait_exit(3min);
  CHECK_MESSAGE(code == 0, script << " exit code "
                                  << (code ? std::to_string(*code) : "none (timed out)") << ":\n"
                                  << run.output());
  MESSAGE(run.output());
}

} // namespace

TEST_CASE("the web UI renders orders, pipelines and compensation safely in a real browser") {
  browser_tools();
  outboxd_process p("ui", fresh_database("outboxd_e2e_ui"));
  p.wait_ready();
  auto xss = p.client().post(
      "/api/orders",
      R"({"customerId":"<img src=x onerror=alert(1)>","totalAmount":12.5,"shippingType":"domestic"})");
  REQUIRE_MESSAGE(xss.status == 201, xss.body);
  // Odd ids go to high-value processing: the failing order must be even to reach billing.
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":400}})");
  auto failed = p.create_order("domestic");
  REQUIRE(failed % 2 == 0);
  // A customer id with a right-to-left override and a zero-width space.
  auto bidi = p.client().post(
      "/api/orders",
      R"({"customerId":"\u202eNIMDA\u200b x","totalAmount":12.5,"shippingType":"domestic"})");
  REQUIRE_MESSAGE(bidi.status == 201, bidi.body);
  REQUIRE(p.wait_status(xss.num("/id"), "CONFIRMED") == "CONFIRMED");
  REQUIRE(p.wait_status(failed, "FAILED") == "FAILED");
  run_browser_script("ui.test.mjs", p);
}

TEST_CASE("the web UI draws a configured fan-out that is not the shipped one in a real browser") {
  browser_tools();
  outboxd_process p("ui-fanout", fresh_database("outboxd_e2e_ui_fanout"),
                    {"--set", R"(http.fanout.OrderCreated=["fraudCheck","shipping","inventory"])"});
  p.wait_ready();
  auto confirmed = p.create_order("domestic");
  REQUIRE(p.wait_status(confirmed, "CONFIRMED") == "CONFIRMED");
  // Inventory is called last here: refusing it leaves shipping to revert.
  p.knobs(R"({"inventory.reserve":{"failNext":1,"failureStatus":400}})");
  auto failed = p.create_order("domestic");
  REQUIRE(p.wait_status(failed, "FAILED") == "FAILED");
  run_browser_script("fanout.test.mjs", p);
}

TEST_CASE("a page of another site cannot change anything through a real browser") {
  browser_tools();
  outboxd_process p("ui-forgery", fresh_database("outboxd_e2e_ui_forgery"));
  p.wait_ready();
  for (int i = 0; i < 2; ++i) {
    auto id = p.create_order("domestic");
    REQUIRE(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  }
  run_browser_script("forgery.test.mjs", p);
}

TEST_CASE("the web UI asks for a token and keeps it for the tab only, in a real browser") {
  browser_tools();
  // printf %s ui-read-token | sha256sum, and the same for ui-admin-token
  outboxd_process p(
      "ui-token", fresh_database("outboxd_e2e_ui_token"),
      {"--set",
       R"(auth.tokens=[{"name":"dash","role":"read","sha256":"7dab86bce5da2e02678f232245c19c81136d2d81bc90cfa9b9d7cef722d125b5"},)"
       R"({"name":"ops","role":"admin","sha256":"52a6d158783bb5ca40237e1aa8b24d1011ca57ce2877f1f9132e6a68eab84f47"}])"});
  p.wait_up();
  p.client().set_default_headers({{"Authorization", "Bearer ui-admin-token"}});
  p.quiet_world();
  auto id = p.create_order("domestic");
  REQUIRE(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  run_browser_script("token.test.mjs", p, {"ui-read-token"});
}

TEST_CASE("the web UI says where the simulator is when it runs in a process of its own") {
  browser_tools();
  // No simulator behind the URL: the page must not need one to load.
  outboxd_process p(
      "ui-sim-elsewhere", fresh_database("outboxd_e2e_ui_sim_elsewhere"),
      {"--set", "simulator.enabled=false", "--set", "simulator.baseUrl=http://127.0.0.1:9"});
  p.wait_up();
  run_browser_script("simulator_elsewhere.test.mjs", p);
}
