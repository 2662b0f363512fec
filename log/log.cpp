// Log sink: formats lines and writes them (JSON to stdout, text to stderr) under one lock so lines
// never interleave; a thread with a holder keeps its lines in a buffer of its own until it writes
// them in one go.
#include "log/log.hpp"

#include <algorithm>
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

// The message of a text line, kept on its line: a line break, another control character, or a
// Unicode character that moves or breaks lines on a terminal (C1 controls, the line and paragraph
// separators, the bidirectional overrides) is written as an escape, so no text from outside (a
// request's path, a partner's answer, a library's multi-line error) can start a line of its own.
void append_text(std::string& out, std::string_view s) {
  auto suspect = [](char ch) {
    auto c = static_cast<unsigned char>(ch);
    return c < 0x20 || c == 0x7F || c == 0xC2 || c == 0xE2;
  };
  auto first = std::find_if(s.begin(), s.end(), suspect);
  out.append(s.begin(), first); // most lines: all of it
  for (auto i = static_cast<std::size_t>(first - s.begin()); i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    auto next = [&](std::size_t k) {
      return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0;
    };
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xC2 && next(1) >= 0x80 && next(1) <= 0x9F) { // U+0080-U+009F
      out += fmt::format("\\u{:04x}", next(1));
      i += 1;
    } else if (c == 0xE2 && ((next(1) == 0x80 && next(2) >= 0xA8 && next(2) <= 0xAE) ||
                             (next(1) == 0x81 && next(2) >= 0xA6 && next(2) <= 0xA9))) {
      // U+2028-U+202E, U+2066-U+2069
      out += fmt::format("\\u{:04x}", ((next(1) & 0x3F) << 6) | (next(2) & 0x3F) | 0x2000);
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
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
  if (!enabled(l)) // a caller choosing the level at run time may not have asked
    return;
  const bool json = out_format.load(std::memory_order_relaxed) == format::json;
  // One line per record: the line break some texts end with (libpq's messages) is not part of it.
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r'))
    message.remove_suffix(1);
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
    line = fmt::format("{} {:<5} [{}] ", timestamp(), level_name(l), actor);
    append_text(line, message);
    line += '\n';
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
