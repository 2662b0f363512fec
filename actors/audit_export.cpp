// Plain POSIX files: open for appending, write everything, fsync, close; each step checked.
#include "actors/audit_export.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <map>
#include <unistd.h>

namespace outboxd::actors {
namespace {

[[noreturn]] void fail(const std::string& path, const char* what) {
  throw export_failed(
      fmt::format("audit export to {} failed ({}): {}", path, what, std::strerror(errno)));
}

void append_synced(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0)
    fail(path, "open");
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      errno = saved;
      fail(path, "write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    fail(path, "fsync");
  }
  if (::close(fd) != 0)
    fail(path, "close");
}

} // namespace

void audit_export::write(const std::vector<persistence::expiring_audit_row>& rows) const {
  std::map<std::string, std::string> by_day;
  for (const auto& r : rows) {
    auto& text = by_day[r.day];
    text += r.json;
    text += '\n';
  }
  for (const auto& [day, text] : by_day)
    append_synced(fmt::format("{}/aggregate_results-{}.jsonl", dir_, day), text);
}

} // namespace outboxd::actors
