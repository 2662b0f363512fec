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
/// object `{"ts":...,"level":...,"actor":...,"msg":...}` per line; nothing below the level
/// configured.
void write(level l, std::string_view actor, std::string_view message);

/// While one lives on a thread, that thread's lines are held and written together, by
/// write_held() or at its end: a loop that logs many lines between two waits makes one write
/// instead of one per line. Its owner calls write_held() before anything that may block (a wait,
/// a statement), so that no line waits on it. Nested holders write at the end of the outermost.
class holder {
public:
  holder();
  ~holder();
  holder(const holder&) = delete;
  holder& operator=(const holder&) = delete;
};

/// Writes the lines this thread holds, if any.
void write_held();

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
