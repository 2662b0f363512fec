// Small pure helpers for reading configuration values out of JSON, shared by the loader and the
// simulator's knob parser so that both word their messages the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::conf {

/// `v` as compact JSON text, cut to 80 characters plus "..." so one bad value cannot flood a log.
std::string show(const rapidjson::Value& v);

/// A JSON integer, or an integral double like 3.0 or 1e3; nullopt otherwise. Values beyond the
/// int64 range are clamped so that a range check rejects them (its message shows the original).
std::optional<std::int64_t> integer_of(const rapidjson::Value& v);

/// " (did you mean pollInterval?)" when one of `candidates` is within two edits of `wrong`
/// (case aside), else "".
std::string suggestion(std::string_view wrong, const std::vector<std::string_view>& candidates);

} // namespace outboxd::conf
