// Credential headers and their masking in what the audit stores.
#include "domain/secrets.hpp"

#include <doctest/doctest.h>

using namespace outboxd::domain;

TEST_CASE("headers whose names carry credentials are recognised in any case") {
  for (const char* name :
       {"Authorization", "X-Api-Key", "x-auth-token", "Client-Secret", "X-PASSWORD"})
    CHECK(is_credential_header(name));
  for (const char* name : {"Content-Type", "X-Request-Id", "Accept"})
    CHECK_FALSE(is_credential_header(name));
}

TEST_CASE("credential values are masked wherever an answer echoes them") {
  auto secrets = credential_values({{"Authorization", "Bearer sk_live_12345"},
                                    {"X-Api-Key", "abc"}, // too short to mask safely
                                    {"Content-Type", "application/json"}});
  REQUIRE(secrets.size() == 2);
  CHECK(secrets[0] == "Bearer sk_live_12345"); // longest first
  CHECK(secrets[1] == "sk_live_12345");
  CHECK(mask_secrets(R"({"echo":{"authorization":"Bearer sk_live_12345"},"again":"sk_live_12345"})",
                     secrets) == R"({"echo":{"authorization":"***"},"again":"***"})");
  CHECK(mask_secrets("nothing secret here, abc", secrets) == "nothing secret here, abc");
  CHECK(mask_secrets("sk_live_12345sk_live_12345", secrets) == "******");
  CHECK(mask_secrets("", secrets).empty());
}

TEST_CASE("a credential echoed inside a JSON string with escapes is masked too") {
  auto secrets = credential_values({{"Authorization", "Bearer s3cr3t/T0ken+abc"}});
  // A slash escaped, letters as \u escapes, a surrogate pair next to it: the string is written
  // again with the credential masked; the strings around it stay as they were sent.
  CHECK(mask_secrets(R"({"seen":"Bearer s3cr3t\/T0ken+abc","other":"a\/b"})", secrets) ==
        R"({"seen":"***","other":"a\/b"})");
  CHECK(mask_secrets(R"({"seen":"\u0042earer \u0073\u0033cr3t\/T0ken+abc \ud83d\ude00 \"q\""})",
                     secrets) == "{\"seen\":\"*** \xF0\x9F\x98\x80 \\\"q\\\"\"}");
  // A key may carry it as well, and text around a JSON body is left alone.
  CHECK(mask_secrets(R"(x {"s3cr3t\/T0ken+abc":1} "unterminated \/)", secrets) ==
        R"(x {"***":1} "unterminated \/)");
  // Escapes JSON does not have leave the string as it was.
  CHECK(mask_secrets(R"(["s3cr3t\/T0ken+abc\x"])", secrets) == R"(["s3cr3t\/T0ken+abc\x"])");
  CHECK(mask_secrets(R"(["nothing \/ here"])", secrets) == R"(["nothing \/ here"])");
}

TEST_CASE("a URL's credentials are masked: the user info's password and credential parameters") {
  CHECK(mask_url_credentials("http://user:S3cretPass@127.0.0.1:8080/fwd/sec?api_key=TOPSECRET&"
                             "page=2&token=abc#top") ==
        "http://user:***@127.0.0.1:8080/fwd/sec?api_key=***&page=2&token=***#top");
  CHECK(mask_url_credentials("https://only-user@host/p") == "https://only-user@host/p");
  CHECK(mask_url_credentials("https://host/p?q=a@b:c") == "https://host/p?q=a@b:c");
  CHECK(mask_url_credentials("https://host/p?Secret=&flag") == "https://host/p?Secret=&flag");
  CHECK(mask_url_credentials("https://host/orders/{orderId}?apiKey={key}") ==
        "https://host/orders/{orderId}?apiKey=***");
  CHECK(mask_url_credentials("not a url") == "not a url");
}
