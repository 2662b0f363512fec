// Operator logs: one line per meaningful step, tagged with the component or actor that took it.
#pragma once

#include <fmt/format.h>
#include <string_view>

namespace outboxd::log {

enum class level { debug, info, warn, error };
enum class format { text, json };

/// Sets the minimum level and the output format (stderr); thread-safe, may be called any time.
void configure(level min_level, format fmt);

bool enabled(level l);

/// Writes one line: `2026-11-30T12:00:00.123Z INFO  [outbox-processor-2] message`, or one JSON
/// object `{"ts":...,"level":...,"actor":...,"msg":...}` per line.
void write(level l, std::string_view actor, std::string_view message);

template <class... Args>
void debug(std::string_view actor, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(level::debug))
    write(level::debug, actor, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void info(std::string_view actor, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(level::info))
    write(level::info, actor, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warn(std::string_view actor, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(level::warn))
    write(level::warn, actor, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void error(std::string_view actor, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(level::error))
    write(level::error, actor, fmt::format(f, std::forward<Args>(args)...));
}

} // namespace outboxd::log
