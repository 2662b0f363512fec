// The one URL splitter and the one placeholder scanner that routing, delivery, revert planning
// and the outgoing client share.
#include "domain/url.hpp"

#include <doctest/doctest.h>
#include <string>
#include <vector>

using namespace outboxd::domain;

TEST_CASE("an absolute URL splits into origin and path with query") {
  auto p = split_url("http://127.0.0.1:8080/api/orders/7?x=1");
  CHECK(p.origin == "http://127.0.0.1:8080");
  CHECK(p.path == "/api/orders/7?x=1");
}

TEST_CASE("a URL without a path has an empty path") {
  auto p = split_url("https://example.com");
  CHECK(p.origin == "https://example.com");
  CHECK(p.path.empty());
}

TEST_CASE("a relative URL has no origin: all of it is the path") {
  auto p = split_url("/api/orders/{id}");
  CHECK(p.origin.empty());
  CHECK(p.path == "/api/orders/{id}");
}

namespace {

std::vector<std::string> names(std::string_view text) {
  std::vector<std::string> out;
  for_each_placeholder(text, [&](const placeholder& ph) { out.emplace_back(ph.name); });
  return out;
}

} // namespace

TEST_CASE("placeholders are '{' identifier '}', and every other brace is text") {
  CHECK(names("/a/{id}/b/{other_1}") == std::vector<std::string>{"id", "other_1"});
  CHECK(names("{}{x-y}{ a }{").empty());
  CHECK(names("{{id}}") == std::vector<std::string>{"id"});
  CHECK(names("{é}").empty());
}

TEST_CASE("next_placeholder reports where a placeholder begins and ends") {
  auto ph = next_placeholder("ab{x}cd{y}", 0);
  REQUIRE(ph);
  CHECK(ph->begin == 2);
  CHECK(ph->end == 5);
  CHECK(ph->name == "x");
  auto second = next_placeholder("ab{x}cd{y}", ph->end);
  REQUIRE(second);
  CHECK(second->name == "y");
  CHECK_FALSE(next_placeholder("ab{x}cd{y}", second->end));
}
