// The one URL splitter and the one placeholder scanner: every module that reads a URL template or
// calls a URL agrees on where the path starts and what a placeholder is.
#include "domain/url.hpp"

namespace outboxd::domain {
namespace {

// ASCII by hand: <cctype> follows the locale, and what counts as a name must not.
bool name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

} // namespace

url_parts split_url(std::string_view url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos)
    return {{}, url};
  auto path_start = url.find('/', scheme_end + 3);
  if (path_start == std::string_view::npos)
    return {url, {}};
  return {url.substr(0, path_start), url.substr(path_start)};
}

std::optional<placeholder> next_placeholder(std::string_view text, std::size_t from) {
  while ((from = text.find('{', from)) != std::string_view::npos) {
    auto close = text.find('}', from + 1);
    if (close == std::string_view::npos)
      return std::nullopt;
    auto name = text.substr(from + 1, close - from - 1);
    bool ident = !name.empty();
    for (char c : name)
      ident = ident && name_char(c);
    if (ident)
      return placeholder{from, close + 1, name};
    ++from;
  }
  return std::nullopt;
}

} // namespace outboxd::domain
