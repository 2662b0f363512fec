// Records of the outbox, the dead-letter queue and the result table, as the API and engine read
// them. Timestamps are ISO-8601 UTC strings from the database clock; JSON columns are JSON text.
#pragma once

#include "domain/attempt.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outboxd::domain {

struct event_record {
  std::int64_t id = 0;
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string payloads_json;
  std::string status; // PENDING | PROCESSING | PROCESSED | DEAD
  int attempts = 0;
  std::optional<std::string> next_retry_at;
  std::optional<std::string> lease_owner;
  std::optional<std::string> lease_expires_at;
  std::optional<std::string> last_error;
  std::string idempotency_key;
  std::string created_at;
  std::string status_changed_at;
  std::optional<std::string> processed_at;
};

/// What one HTTP attempt did: the columns of an aggregate_results row that the engine writes.
struct attempt_columns {
  std::int64_t event_id = 0;
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string destination;
  int fanout_order = 0;
  int attempt = 0;
  std::int64_t run = 0; // the lease token of the event's run that called; 0: none (a revert)
  std::string endpoint_url;
  std::string http_method;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> request_payload_json;
  std::optional<int> response_status;
  // The answer's body is in at most one of these three (domain::classify_body decides which).
  std::optional<std::string> response_payload_json; // JSON that jsonb takes
  std::optional<std::string> response_text;         // other well-formed UTF-8 text without NUL
  std::optional<std::string> response_body;         // any other bytes, raw
  std::optional<std::string> response_content_type; // the answer's Content-Type, when sent
  bool response_truncated = false;                  // the body was cut at the client's size limit
  std::optional<std::string> error_message;
  std::optional<int> duration_ms;
  attempt_outcome outcome = attempt_outcome::success;
};

/// One HTTP attempt read back (a row of aggregate_results).
struct attempt_record : attempt_columns {
  std::int64_t id = 0;
  std::string published_at;
  /// As listed: a body over max_listed_body_bytes was left out (JSON) or cut (text, bytes).
  bool bodies_shortened = false;
};

/// The most bytes of each body (request, response) an attempt carries in the API's listings.
inline constexpr std::size_t max_listed_body_bytes = 16384;

struct dead_letter_record {
  std::int64_t id = 0;
  std::int64_t original_event_id = 0;
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string payloads_json;
  std::string reason; // MAX_RETRIES_EXCEEDED | NON_RETRYABLE_ERROR | CANCELLATION_FAILED
  std::optional<std::string> last_error;
  std::string status; // PENDING | PROCESSING | PROCESSED | FAILED
  int attempts = 0;
  std::optional<std::string> next_retry_at;
  std::optional<std::string> revert_error;
  std::string failed_at;
  std::string status_changed_at;
  std::optional<std::string> resolved_at;
};

/// Where one step of an event stands, from its attempt rows.
enum class step_state {
  succeeded,  // some attempt succeeded
  skipped,    // no route matched and the destination is optional
  refused,    // answered with a definitive refusal (or could not be called at all)
  answered,   // every attempt got a transient error answer (5xx, 429, ...)
  unanswered, // some attempt got no answer: a timeout or a cut connection
};

/// attempt_columns::run of a compensation's re-send of a step (to settle it): no run of the event.
inline constexpr std::int64_t compensation_run = -1;

/// A step's attempt rows in short. Runs are named by their lease tokens (each claim takes a
/// larger one); rows from before run tokens were recorded count as run 0, a compensation's
/// re-sends as no run.
struct step_history {
  step_state state = step_state::answered;
  std::optional<std::int64_t> done_in; // the first run with a success (or skip) of it
  std::vector<std::int64_t> runs;      // the runs with a row of it (run 0 never listed)
};

} // namespace outboxd::domain
