// Runs every command that README.md and docs/*.md show in ```sh blocks, exactly as written, against
// a real outboxd, so the documentation cannot drift from what the program does.
//
// How. Each document gets a fresh database and its own `outboxd serve` on a free port (the
// simulator's knobs set to 0 % failures, as in every e2e test: the shipped demo knobs fail calls
// at random, which would make the commands' answers a matter of luck). A command is one logical
// line of a block (lines ending in `\` continue it; blank lines and `#` comments are skipped). It
// runs in `bash` from the source directory with its text untouched; only its environment differs:
//   - PATH starts with a scratch directory holding `outboxd` (the binary under test) and a `curl`
//     wrapper. The wrapper rewrites `localhost:9000` and `127.0.0.1:9000` in its arguments to the
//     port of the outboxd this test started, so no other process is ever contacted.
//   - The wrapper adds `-D <file>` (dump the response headers to a file), which leaves the
//     command's own output alone whatever options it uses, reads the last status line from that
//     file and exits 22 unless it is 2xx. It also appends "<status> <exit code> <arguments>" to
//     a log, which the test reads after each command: a status check inside a pipeline (whose
//     exit code is the last command's) cannot hide a failed call that way.
//   - DATABASE_URL is the test's database (for `outboxd migrate`, `outboxd check-config`), and
//     DOCS_OUT_DIR a scratch directory (so `scripts/docs.sh` does not rewrite the source tree).
// Each command must exit 0, and each curl call it makes must answer 2xx. Commands whose program
// starts an outboxd (or a build) of its own are exempt, each with its reason in `exempt`; the
// test fails if an exemption matches no documented command, so the list cannot go stale.
#include "test/support/outboxd_process.hpp"
#include "test/support/process.hpp"
#include "test/support/test_db.hpp"

#include <algorithm>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <unistd.h>

using namespace outboxd::test;
namespace fs = std::filesystem;

namespace {

/// Programs that are documented but not run here, and why.
const std::map<std::string, std::string> exempt = {
    {"scripts/run.sh", "installs packages, builds a release binary and runs its own PostgreSQL "
                       "and outboxd on port 9000 in the foreground until Ctrl-C"},
    {"scripts/test.sh", "builds the asan preset and runs every test, this one included"},
    {"scripts/reliability.sh", "the long chaos run: its own outboxd processes for minutes"},
};

struct command {
  std::string document; // relative to the source directory
  int line = 0;         // where the command starts
  std::string text;     // exactly as written (continuation lines included)
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return {};
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// The commands of the ```sh blocks of one Markdown document.
std::vector<command> commands_of(const std::string& document) {
  std::vector<command> out;
  std::istringstream in(read_file(fs::path(OUTBOXD_SOURCE_DIR) / document));
  std::string line;
  bool in_block = false;
  int number = 0;
  command pending;
  while (std::getline(in, line)) {
    ++number;
    auto t = trim(line);
    if (!in_block) {
      in_block = t == "```sh";
      continue;
    }
    if (t == "```") {
      in_block = false;
      continue;
    }
    if (pending.text.empty()) {
      if (t.empty() || t[0] == '#')
        continue;
      pending = {document, number, {}};
    } else {
      pending.text += "\n";
    }
    pending.text += line;
    if (!t.empty() && t.back() == '\\')
      continue;
    out.push_back(pending);
    pending = {};
  }
  return out;
}

/// The program a command line runs: its first word after any VAR=value assignments.
std::string program_of(const std::string& text) {
  static const std::regex assignment("[A-Za-z_][A-Za-z0-9_]*=.*");
  std::istringstream in(text);
  std::string word;
  while (in >> word)
    if (!std::regex_match(word, assignment))
      return word;
  return {};
}

/// README.md, then docs/*.md in name order.
std::vector<std::string> documents() {
  std::vector<std::string> docs;
  for (const auto& entry : fs::directory_iterator(fs::path(OUTBOXD_SOURCE_DIR) / "docs"))
    if (entry.path().extension() == ".md")
      docs.push_back("docs/" + entry.path().filename().string());
  std::sort(docs.begin(), docs.end());
  docs.insert(docs.begin(), "README.md");
  return docs;
}

std::string find_program(const std::string& name) {
  std::istringstream path(std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(path, dir, ':'))
    if (!dir.empty() && fs::exists(fs::path(dir) / name))
      return (fs::path(dir) / name).string();
  return {};
}

/// A scratch PATH directory with `outboxd` and the `curl` wrapper for the outboxd on `port`.
fs::path make_bin(const fs::path& scratch, int port, const fs::path& curl_log) {
  auto bin = scratch / "bin";
  fs::create_directories(bin);
  fs::create_symlink(OUTBOXD_BINARY, bin / "outboxd");
  auto real_curl = find_program("curl");
  REQUIRE_MESSAGE(!real_curl.empty(), "curl is not installed");
  std::ofstream(bin / "curl") << "#!/usr/bin/env bash\n"
                              << "# curl for the docs test (see docs_commands_test.cpp).\n"
                              << "port=" << port << "\n"
                              << "log='" << curl_log.string() << "'\n"
                              << "real='" << real_curl << "'\n"
                              << R"sh(args=()
for a in "$@"; do
  a="${a//localhost:9000/127.0.0.1:$port}"
  a="${a//127.0.0.1:9000/127.0.0.1:$port}"
  args+=("$a")
done
headers="$(mktemp)"
"$real" -D "$headers" "${args[@]}"
rc=$?
status="$(grep -a -o -E '^HTTP/[0-9.]+ [0-9]{3}' "$headers" | tail -n 1 | cut -d' ' -f2)"
rm -f "$headers"
printf '%s %s %s\n' "${status:-none}" "$rc" "$*" >> "$log"
[ "$rc" -eq 0 ] || exit "$rc"
case "$status" in 2??) exit 0 ;; esac
echo "docs test: HTTP ${status:-none} from: curl $*" >&2
exit 22
)sh";
  fs::permissions(bin / "curl", fs::perms::owner_all, fs::perm_options::add);
  return bin;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    out.push_back(line);
  return out;
}

} // namespace

TEST_CASE("every command the README and docs/*.md show runs as written against a real outboxd") {
  std::set<std::string> exemptions_used;
  int run = 0;
  int index = 0;
  for (const auto& document : documents()) {
    ++index;
    std::vector<command> to_run;
    for (auto& c : commands_of(document)) {
      auto program = program_of(c.text);
      if (exempt.count(program)) {
        exemptions_used.insert(program);
        MESSAGE(document << ":" << c.line << " not run (" << exempt.at(program) << "): " << c.text);
      } else {
        to_run.push_back(c);
      }
    }
    if (to_run.empty())
      continue;

    auto scratch = fs::path("/tmp") /
                   ("outboxd-docs-" + std::to_string(::getpid()) + "-" + std::to_string(index));
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    auto db = fresh_database("outboxd_e2e_docs_" + std::to_string(index));
    outboxd_process p("docs-" + std::to_string(index), db);
    p.wait_ready();
    auto curl_log = scratch / "curl.log";
    auto bin = make_bin(scratch, p.port(), curl_log);
    std::map<std::string, std::string> env{
        {"PATH",
         bin.string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin")},
        {"DATABASE_URL", db},
        {"DOCS_OUT_DIR", (scratch / "diagrams").string()}};

    for (const auto& c : to_run) {
      ++run;
      auto script = scratch / ("command-" + std::to_string(c.line) + ".sh");
      std::ofstream(script) << c.text << "\n";
      auto calls_before = lines_of(curl_log).size();
      auto [code, output] = run_command({"/bin/bash", "-c", "cd \"$1\" && exec bash \"$2\"",
                                         "docs-command", OUTBOXD_SOURCE_DIR, script.string()},
                                        env);
      INFO(document, ":", c.line, ": ", c.text, "\n--- output ---\n", output);
      CHECK(code == 0);
      auto calls = lines_of(curl_log);
      if (program_of(c.text) == "curl" || c.text.find("curl ") != std::string::npos)
        CHECK_MESSAGE(calls.size() > calls_before, "the command made no curl call");
      for (auto i = calls_before; i < calls.size(); ++i)
        CHECK_MESSAGE(calls[i].rfind('2', 0) == 0, "a curl call did not answer 2xx: ", calls[i]);
    }
    fs::remove_all(scratch);
  }
  CHECK(run > 0);
  for (const auto& [program, why] : exempt)
    CHECK_MESSAGE(exemptions_used.count(program), "the exemption of ", program,
                  " matches no documented command: remove it");
}

TEST_CASE("every test case docs/guarantees.md cites exists in the file it names") {
  static const std::regex cited(R"re(^- `([^`]+)`: "(.*)"\s*$)re");
  // A test name written as two literals over two lines: "a " "b".
  static const std::regex split_literal(R"re("\s*\n\s*")re");
  std::istringstream in(read_file(fs::path(OUTBOXD_SOURCE_DIR) / "docs/guarantees.md"));
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, cited))
      continue;
    ++checked;
    auto source =
        std::regex_replace(read_file(fs::path(OUTBOXD_SOURCE_DIR) / m[1].str()), split_literal, "");
    CHECK_MESSAGE(source.find("\"" + m[2].str() + "\"") != std::string::npos, m[1].str(),
                  " has no test case \"", m[2].str(), "\"");
  }
  CHECK(checked > 20);
}
