// Where an answer body is stored (jsonb, text or bytes), the UTF-8 rule of text columns, the
// readable rendering of arbitrary bytes and base64.
#include "domain/response_body.hpp"

#include <doctest/doctest.h>
#include <string>

using namespace outboxd::domain;
using namespace std::string_literals;

TEST_CASE("JSON that jsonb takes is json") {
  CHECK(classify_body(R"({"reservationId":"RES-1","n":[1,2.5e10,-0,true,null]})") ==
        body_kind::json);
  CHECK(classify_body(" \"just a string\" ") == body_kind::json);
  CHECK(classify_body(R"({"smile":"\ud83d\ude00","é":"\u00e9"})") == body_kind::json);
  CHECK(classify_body("{\"raw\":\"caf\xC3\xA9\"}") == body_kind::json);
  CHECK(classify_body("[1e-1000]") == body_kind::json);
}

TEST_CASE("an empty body is empty") {
  CHECK(classify_body("") == body_kind::empty);
}

TEST_CASE("JSON that jsonb refuses, but that is well-formed text, is text") {
  CHECK(classify_body(R"({"a":"x\u0000y"})") == body_kind::text);
  CHECK(classify_body(R"({"x\u0000":1})") == body_kind::text);
  CHECK(classify_body(R"(["\udc00"])") == body_kind::text); // lone low surrogate
  CHECK(classify_body(R"(["\ud800"])") == body_kind::text); // lone high surrogate
  CHECK(classify_body("[1e-1001]") == body_kind::text);     // beyond numeric's exponent range
  CHECK(classify_body("[" + std::string(1001, '1') + "]") == body_kind::text);
  CHECK(classify_body(std::string(max_json_depth + 1, '[') +
                      std::string(max_json_depth + 1, ']')) == body_kind::text);
  CHECK(classify_body(std::string(max_json_depth, '[') + std::string(max_json_depth, ']')) ==
        body_kind::json);
  // Deep enough to overflow a recursive parser's stack: still answered, as text.
  CHECK(classify_body(std::string(1'000'000, '[')) == body_kind::text);
  CHECK(classify_body("<html>reserved, probably</html>") == body_kind::text);
  // jsonb refuses a byte-order mark (which rapidjson's stream would skip).
  CHECK(classify_body("\xEF\xBB\xBF{\"id\":\"R-1\"}") == body_kind::text);
  CHECK(classify_body(R"({"a":1} trailing)") == body_kind::text);
  CHECK(classify_body(R"(["a\\u0000"])") == body_kind::json); // an escaped backslash, no NUL
}

TEST_CASE("invalid UTF-8, NUL bytes and binary are bytes") {
  CHECK(classify_body("caf\xE9 cr\xE8me") == body_kind::bytes); // Latin-1
  CHECK(classify_body("{}\0garbage"s) == body_kind::bytes);
  CHECK(classify_body("a\0b"s) == body_kind::bytes);
  CHECK(classify_body("\x89PNG\r\n\x1a\n\0\0\0\rIHDR"s) == body_kind::bytes);
  CHECK(classify_body("{\"a\":\"\xC0\xAF\"}") == body_kind::bytes);     // overlong
  CHECK(classify_body("{\"a\":\"\xED\xA0\x80\"}") == body_kind::bytes); // encoded surrogate
  CHECK(classify_body("\xF4\x90\x80\x80") == body_kind::bytes);         // above U+10FFFF
  CHECK(classify_body("\xE2\x82") == body_kind::bytes);                 // cut sequence
}

TEST_CASE("storable text is well-formed UTF-8 without NUL") {
  CHECK(is_storable_text(""));
  CHECK(is_storable_text("plain ASCII"));
  CHECK(is_storable_text("\xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"));
  CHECK_FALSE(is_storable_text("a\0b"s));
  CHECK_FALSE(is_storable_text("\xE9"));
  CHECK_FALSE(is_storable_text("\xE0\x80\xAF"));
  CHECK_FALSE(is_storable_text("\xF8\x88\x80\x80\x80"));
}

TEST_CASE("readable text replaces what text cannot hold and cuts on a character boundary") {
  CHECK(readable_text("caf\xE9!") == "caf\xEF\xBF\xBD!");
  CHECK(readable_text("a\0b"s) == "a\xEF\xBF\xBD"
                                  "b");
  CHECK(readable_text("plain") == "plain");
  CHECK(is_storable_text(readable_text("\x89PNG\r\n\x1a\n\0\0\0\rIHDR\xFF\xFE"s)));
  CHECK(readable_text("abcdef", 3) == "abc\xE2\x80\xA6");
  CHECK(readable_text("\xE2\x82\xAC\xE2\x82\xAC", 4) == "\xE2\x82\xAC\xE2\x80\xA6");
}

TEST_CASE("base64 is RFC 4648 with padding") {
  CHECK(base64("") == "");
  CHECK(base64("f") == "Zg==");
  CHECK(base64("fo") == "Zm8=");
  CHECK(base64("foo") == "Zm9v");
  CHECK(base64("foob") == "Zm9vYg==");
  CHECK(base64("\xFF\x00\x10"s) == "/wAQ");
}
