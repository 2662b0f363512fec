// Log sink: formats lines and writes them (JSON to stdout, text to stderr) under one lock so lines
// never interleave; a thread with a holder keeps its lines in a buffer of its own until it writes
// them in one go.
#include "log/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace outboxd::log {
namespace {

std::atomic<level> min_level{level::info};
std::atomic<format> out_format{format::text};
std::mutex write_mutex;

/// The lines a holder keeps on this thread, and where they go.
struct held {
  int holders = 0;
  std::string lines;
  std::FILE* out = nullptr;
};
thread_local held this_thread;
// Past this many bytes held lines are written at once.
constexpr std::size_t max_held_bytes = 32 * 1024;

void write_out(std::FILE* out, std::string_view text) {
  std::lock_guard lock(write_mutex);
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

std::string_view level_name(level l) {
  switch (l) {
  case level::debug:
    return "DEBUG";
  case level::info:
    return "INFO";
  case level::warn:
    return "WARN";
  case level::error:
    return "ERROR";
  }
  return "INFO";
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, ms);
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20)
        out += fmt::format("\\u{:04x}", c);
      else
        out += static_cast<char>(c);
    }
  }
  out += '"';
}

} // namespace

void configure(level l, format f) {
  min_level = l;
  out_format = f;
}

bool enabled(level l) {
  return l >= min_level.load(std::memory_order_relaxed);
}

void write(level l, std::string_view actor, std::string_view message) {
  const bool json = out_format.load(std::memory_order_relaxed) == format::json;
  std::string line;
  if (json) {
    line = "{\"ts\":";
    append_json_string(line, timestamp());
    line += ",\"level\":";
    append_json_string(line, level_name(l));
    line += ",\"actor\":";
    append_json_string(line, actor);
    line += ",\"msg\":";
    append_json_string(line, message);
    line += "}\n";
  } else {
    line = fmt::format("{} {:<5} [{}] {}\n", timestamp(), level_name(l), actor, message);
  }
  // JSON lines go to stdout, where a container runtime's log collector reads records; text lines
  // go to stderr, beside the command line's own messages.
  std::FILE* out = json ? stdout : stderr;
  auto& h = this_thread;
  if (h.holders == 0) {
    write_out(out, line);
    return;
  }
  if (h.out != out)
    write_held();
  h.out = out;
  h.lines += line;
  if (h.lines.size() >= max_held_bytes)
    write_held();
}

holder::holder() {
  ++this_thread.holders;
}

holder::~holder() {
  if (--this_thread.holders == 0)
    write_held();
}

void write_held() {
  auto& h = this_thread;
  if (h.lines.empty())
    return;
  write_out(h.out, h.lines);
  h.lines.clear();
}

} // namespace outboxd::log
