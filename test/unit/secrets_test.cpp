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
