// Broken configuration files (test/reliability/broken_configs, each starting with a
// "// expect: <text>" line): `outboxd serve` refuses every one at start-up with exit code 2 and a
// message naming the problem, before it touches a database.
#include "test/support/process.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>

using namespace outboxd::test;

TEST_CASE(
    "every broken configuration file is refused at start-up with exit code 2 naming the key") {
  auto dir = std::filesystem::path(OUTBOXD_SOURCE_DIR) / "test/reliability/broken_configs";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json")
      continue;
    ++files;
    std::ifstream in(entry.path());
    std::string first;
    std::getline(in, first);
    const std::string marker = "// expect: ";
    REQUIRE_MESSAGE(first.rfind(marker, 0) == 0, entry.path() << " has no expect line");
    auto expected = first.substr(marker.size());
    // A database that does not exist: reaching it would mean the configuration was accepted.
    auto [code, out] = run_command({OUTBOXD_BINARY, "serve", "--config", entry.path().string()},
                                   {{"DATABASE_URL", "host=/nonexistent dbname=none"}});
    CAPTURE(entry.path().filename().string());
    CHECK(code == 2);
    CHECK_MESSAGE(out.find(expected) != std::string::npos,
                  "expected \"" << expected << "\" in: " << out);
  }
  CHECK(files >= 20);
}
