// The simulator's fault knobs: their type, their names and the one validation of their values,
// shared by the configuration loader (simulator.services.*) and PUT /api/simulator/config.
// Pure (target outboxd_simulator_knobs), so that conf can link it without the server.
#pragma once

#include <array>
#include <cstdint>
#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace outboxd::simulator {

/// Retry-After a simulated failure carries: none, a number of seconds, or an HTTP-date.
using retry_after_knob = std::variant<std::monostate, std::int64_t, std::string>;

/// Run-time fault knobs of one simulated service operation (e.g. `billing.charge`).
struct service_knobs {
  double failure_rate = 0.0;
  int failure_status = 503;
  retry_after_knob retry_after;
  int latency_min_ms = 0;
  int latency_max_ms = 0;
  double late_rate = 0.0; // apply the side effect, then answer after late_ms
  int late_ms = 0;
  int fail_next = 0; // fail the next N calls regardless of failure_rate
};

/// Every knob, `<service>.<operation>`, in the order the API lists them.
inline constexpr std::array<std::string_view, 12> knob_names = {"inventory.reserve",
                                                                "inventory.release",
                                                                "fraudCheck.check",
                                                                "shipping.domestic.create",
                                                                "shipping.domestic.cancel",
                                                                "shipping.international.create",
                                                                "shipping.international.cancel",
                                                                "billing.charge",
                                                                "billing.refund",
                                                                "highValue.process",
                                                                "highValue.cancel",
                                                                "notifications.send"};

/// The field names a knob object may hold (failureRate, failureStatus, ...).
inline constexpr std::array<std::string_view, 7> knob_fields = {
    "failureRate", "failureStatus", "retryAfter", "latencyMs", "lateRate", "lateMs", "failNext"};

/// True when `name` is one of knob_names.
bool is_knob_name(std::string_view name);

/// "inventory.reserve, inventory.release, ...", for messages about an unknown knob.
std::string known_knob_names();

/// Applies the fields present in `patch` (a JSON object of knob fields) to `knobs` and returns
/// one message per problem, each naming `key_path.<field>`: "simulator.services.billing.charge.
/// failureRate must be between 0 and 1, got 1.5". Valid fields are applied even when others are
/// not, so a caller that wants all-or-nothing patches a copy and keeps it only when no message
/// comes back. Ranges: failureRate and lateRate 0..1, failureStatus 400..599, retryAfter null or
/// seconds >= 0 or a non-empty HTTP-date string, latencyMs ms or [min, max] within 0..60000,
/// lateMs 0..600000, failNext >= 0.
std::vector<std::string> apply_knob_patch(const rapidjson::Value& patch, service_knobs& knobs,
                                          const std::string& key_path);

} // namespace outboxd::simulator
