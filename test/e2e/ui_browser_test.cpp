// The web UI in a real browser: a real outboxd on a fresh database, orders made through the API
// (an XSS customer, a billing failure that is compensated), then test/browser/ui.test.mjs drives
// Debian's chromium through playwright-core against the page.
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <sstream>
#include <unistd.h>

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

} // namespace

TEST_CASE("the web UI renders orders, pipelines and compensation safely in a real browser") {
  // Missing tools fail the test: a skipped browser test would hide an untested UI.
  REQUIRE_MESSAGE(::access("/usr/bin/chromium", X_OK) == 0,
                  "/usr/bin/chromium not found: run scripts/install-deps.sh (Debian package "
                  "chromium)");
  auto node = find_on_path("node");
  REQUIRE_MESSAGE(!node.empty(),
                  "node not found on PATH: run scripts/install-deps.sh (packages nodejs, npm)");
  auto browser_dir = std::filesystem::path(OUTBOXD_SOURCE_DIR) / "test" / "browser";
  REQUIRE_MESSAGE(std::filesystem::exists(browser_dir / "node_modules" / "playwright-core"),
                  "playwright-core is not installed: run npm ci --prefix test/browser "
                  "(scripts/test.sh does)");

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
  REQUIRE(p.wait_status(xss.num("/id"), "CONFIRMED") == "CONFIRMED");
  REQUIRE(p.wait_status(failed, "FAILED") == "FAILED");

  auto log = "/tmp/outboxd-e2e-" + std::to_string(::getpid()) + "-ui-browser.log";
  child_process script({node, (browser_dir / "ui.test.mjs").string(),
                        "http://127.0.0.1:" + std::to_string(p.port())},
                       {}, log);
  auto code = script.wait_exit(3min);
  CHECK_MESSAGE(code == 0, "ui.test.mjs exit code "
                               << (code ? std::to_string(*code) : "none (timed out)") << ":\n"
                               << script.output());
  MESSAGE(script.output());
}
