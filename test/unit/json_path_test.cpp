// The JSONPath subset: what parses, what is refused, and lookups on missing paths.
#include "domain/json_path.hpp"
#include "domain/routing.hpp"

#include <doctest/doctest.h>

using namespace outboxd::domain;

TEST_CASE("dotted, indexed and quoted steps find their values") {
  rapidjson::Document d;
  d.Parse(R"({"a":{"b":[{"c":"x"},{"c":"y"}]},"odd key":1})");
  CHECK(std::string(json_path::parse("$.a.b[1].c").value().find(d)->GetString()) == "y");
  CHECK(json_path::parse("$['odd key']").value().find(d)->GetInt() == 1);
  CHECK(json_path::parse("$").value().find(d) == &d);
}

TEST_CASE("missing steps, wrong types and out-of-range indexes find nothing") {
  rapidjson::Document d;
  d.Parse(R"({"a":{"b":[1]},"s":"text"})");
  CHECK(json_path::parse("$.nope").value().find(d) == nullptr);
  CHECK(json_path::parse("$.a.b[5]").value().find(d) == nullptr);
  CHECK(json_path::parse("$.s.x").value().find(d) == nullptr);
  CHECK(json_path::parse("$.a[0]").value().find(d) == nullptr);
}

TEST_CASE("paths outside the documented subset are refused with the reason") {
  for (const char* bad : {"", "a.b", "$.", "$..a", "$.a[*]", "$.a[-1]", "$.a[1", "$['a", "$a"}) {
    auto p = json_path::parse(bad);
    CHECK_MESSAGE(!p.ok(), bad);
    if (!p.ok())
      CHECK(p.err().message.find("jsonPath") != std::string::npos);
  }
}

TEST_CASE("template placeholders are found in order and only when well-formed") {
  auto p = template_placeholders("/api/{a}/x/{b_2}/{}/{not valid}/{a}");
  REQUIRE(p.size() == 3);
  CHECK(p[0] == "a");
  CHECK(p[1] == "b_2");
  CHECK(p[2] == "a");
}

TEST_CASE("operator names parse") {
  CHECK(parse_condition_operator("gte") == condition_operator::gte);
  CHECK(parse_condition_operator("contains") == condition_operator::contains);
  CHECK_FALSE(parse_condition_operator("equals"));
}
