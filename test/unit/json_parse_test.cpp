// parse_json_bounded: the JSON others write, parsed with its depth bounded.
#include "domain/json_parse.hpp"

#include <doctest/doctest.h>
#include <string>

using namespace outboxd::domain;

namespace {

std::string nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

} // namespace

TEST_CASE("JSON up to the depth bound parses; one level more is refused where it starts") {
  rapidjson::Document doc;
  CHECK_FALSE(parse_json_bounded<0>(doc, nested(max_json_depth)));
  CHECK(doc.IsArray());

  auto error = parse_json_bounded<0>(doc, nested(max_json_depth + 1));
  REQUIRE(error);
  CHECK(error->message == "nested deeper than 1000 levels");
  CHECK(error->offset == max_json_depth); // the bracket that opens level 1001
  CHECK(doc.IsNull());

  error = parse_json_bounded<0>(doc, R"({"a": {"b": [1]}})", 2);
  REQUIRE(error);
  CHECK(error->message == "nested deeper than 2 levels");
  CHECK_FALSE(parse_json_bounded<0>(doc, R"({"a": {"b": 1}})", 2));
  CHECK(doc["a"]["b"].GetInt() == 1);
}

TEST_CASE("a depth far beyond any stack is refused without recursing") {
  rapidjson::Document doc;
  auto error = parse_json_bounded<0>(doc, nested(1'000'000));
  REQUIRE(error);
  CHECK(error->message == "nested deeper than 1000 levels");
}

TEST_CASE("a syntax error reads as rapidjson's, at its offset, and the flags are passed on") {
  rapidjson::Document doc;
  auto error = parse_json_bounded<0>(doc, R"({"a": 1,})");
  REQUIRE(error);
  CHECK(error->message == "Missing a name for object member.");
  CHECK(error->offset == 8);
  CHECK_FALSE(parse_json_bounded<rapidjson::kParseTrailingCommasFlag>(doc, R"({"a": 1,})"));
  CHECK(doc["a"].GetInt() == 1);
  CHECK(parse_json_bounded<rapidjson::kParseValidateEncodingFlag>(doc, "\"\xff\""));
  CHECK(parse_json_bounded<0>(doc, ""));
}

TEST_CASE("a NUL byte after the value is refused, not read as the end of the text") {
  rapidjson::Document doc;
  using namespace std::string_literals;
  for (const auto& text : {"{\"a\": 1}\0{\"a\": 2}"s, "{}  \0"s, "12\0 34"s, "[1]\n\0"s}) {
    CAPTURE(text);
    auto error = parse_json_bounded<0>(doc, text);
    REQUIRE(error);
    CHECK(error->message == "a NUL byte after the value (only whitespace may follow it)");
    CHECK(error->offset == text.find('\0'));
    CHECK(doc.IsNull());
  }
  // Inside a string a NUL is a control character, refused as before.
  CHECK(parse_json_bounded<0>(doc, "[\"a\0b\"]"s));
  CHECK_FALSE(parse_json_bounded<0>(doc, "{\"a\": 1}  \n"s));
}

TEST_CASE("a lone surrogate escape is refused, in a value or a name; a pair is a character") {
  rapidjson::Document doc;
  for (const char* text :
       {R"({"customerId": "A\udc00"})", R"({"a\udfff": 1})", R"(["x", "\udc00z"])"}) {
    CAPTURE(text);
    auto error = parse_json_bounded<0>(doc, text);
    REQUIRE(error);
    CHECK(error->message.find("half of a UTF-16 surrogate pair") != std::string::npos);
    CHECK(doc.IsNull());
  }
  REQUIRE_FALSE(parse_json_bounded<0>(doc, R"({"emoji": "\ud83d\ude00"})"));
  CHECK(std::string(doc["emoji"].GetString()) == "\xF0\x9F\x98\x80");
}
