// Simulator fault knobs: their names and the one validation of their values, shared by the
// configuration loader (simulator.services.*) and PUT /api/simulator/config.
#pragma once

#include "conf/settings.hpp"

#include <array>
#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::conf {

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
std::vector<std::string> apply_knob_patch(const rapidjson::Value& patch, simulator_knobs& knobs,
                                          const std::string& key_path);

} // namespace outboxd::conf
