// Delivery decisions for one destination of an event: which route to call, the URL to call,
// how to classify the answer, and how long to wait before a retry. Pure functions.
#pragma once

#include "domain/attempt.hpp"
#include "domain/expected.hpp"
#include "domain/routing.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <rapidjson/document.h>
#include <string>
#include <string_view>

namespace outboxd::domain {

/// Stored responses of destinations already called successfully for the same event, by
/// destination name (what `previousDestination` conditions read). Values are owned by the caller.
using previous_responses = std::map<std::string, const rapidjson::Value*, std::less<>>;

/// Whether `c` holds. It reads `payload` (this destination's own payload), or with
/// `previous_destination` that destination's entry in `previous`. A missing value, a missing
/// destination or a JSON null make every operator false (`exists` included); gt/gte/lt/lte
/// compare as numbers (numeric strings count as numbers) and are false when either side is not
/// numeric; eq/ne compare numbers numerically and everything else by JSON value, with a string
/// literal also matching a number written the same way ("50" eq 50); `contains` is substring for
/// strings and element membership for arrays.
bool condition_holds(const condition& c, const rapidjson::Value* payload,
                     const previous_responses& previous);

/// The route to call for a destination, or why none applies.
struct route_choice {
  enum class kind { call, skip, fail };
  kind what = kind::skip;
  const route* chosen = nullptr; // set when what == call
  std::string reason;            // set for skip and fail: names the destination and conditions
};

/// The first route whose condition holds (a route without condition always holds). When none
/// does: `skip`, or `fail` when the destination is `required`.
route_choice choose_route(const destination& d, const rapidjson::Value* payload,
                          const previous_responses& previous);

/// Percent-encodes `value` as one path segment: everything but unreserved characters
/// (A-Z a-z 0-9 - _ . ~) is encoded, and a value of "." or ".." is encoded entirely, so a value
/// can never add a segment, climb a level, start a query or a fragment.
std::string percent_encode_segment(std::string_view value);

/// Replaces every `{name}` of `url_template` with the percent-encoded `params[name]`; an error
/// names the first placeholder without a value.
expected<std::string> fill_url(std::string_view url_template,
                               const std::map<std::string, std::string>& params);

/// How an answered (or failed) call ended, for retry decisions; never `skipped`:
/// 2xx → success; DELETE + 404 → success (already gone); 408, 425, 429, 5xx → retryable; other
/// statuses → non_retryable. `status` is nullopt for transport errors (refused, reset, timeout),
/// which are retryable.
attempt_outcome classify(std::string_view method, std::optional<int> status);

/// The transport errors that mean the request never left (no connection, no TLS session), as a
/// POSIX regular expression on the stored error: such a call cannot have been applied, so a
/// compensation does not re-send it to find out. The outgoing client's messages start so.
inline constexpr const char* never_sent_errors =
    "^(connection failed: |connect timeout after |TLS: )";

/// How the last error of a run held back without a call (circuit open, a limit reached) starts:
/// the claims tell from it that a run's last hold was not its first.
inline constexpr const char* held_back_prefix = "held back: ";
/// What a held run's last_error keeps of its destination's answer before the hold:
/// "held back: billing: circuit open; last answer: billing: HTTP 503: ...".
inline constexpr std::string_view last_answer_marker = "; last answer: ";

/// Parses a Retry-After header value: delta-seconds ("120") or an HTTP-date (IMF-fixdate,
/// "Wed, 21 Oct 2015 07:28:00 GMT") relative to `now_unix_ms`. nullopt when empty or
/// unparsable; a date in the past gives zero. Huge values saturate instead of overflowing.
std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view header,
                                                           std::int64_t now_unix_ms);

/// The delay before retry number `retry` (1 = the first retry): base * 2^(retry-1) scaled by a
/// jitter factor in [0.5, 1.0] (from `jitter` in [0, 1)), or `retry_after` when that is longer;
/// always clamped to [0, max].
std::chrono::milliseconds retry_delay(int retry,
                                      std::optional<std::chrono::milliseconds> retry_after,
                                      std::chrono::milliseconds base, std::chrono::milliseconds max,
                                      double jitter);

/// How many events a processor claims at once. outbox.batchSize is shared by the outbox.poolSize
/// processors: each starts at batchSize/poolSize (at least 1), so that a burst keeps every one
/// busy and none sits on events another could run.
struct claim_sizing {
  int batch_size;
  int pool_size;
  /// A batch is kept to about what its processor runs in this time, so that one processor does
  /// not sit on slow events (slow remotes) while the others run out of work at the end of a
  /// backlog.
  std::chrono::milliseconds batch_time{250};

  int base() const;
  /// The next claim's size, from the last one: `claimed` of `size` events, run in `took`. After a
  /// short claim, the base. After a full one there is a backlog: the size doubles, up to 8 times
  /// the base and never beyond batchSize, so that many processors do not pay a claim per event;
  /// and never beyond what the last batch's pace runs in batch_time (at least 1).
  int next(int size, std::size_t claimed, std::chrono::nanoseconds took) const;
};

} // namespace outboxd::domain
