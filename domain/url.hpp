// URL and template text shared by routing, delivery, revert planning and the outgoing client:
// where an absolute URL's path starts, and what a `{name}` placeholder is. Pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace outboxd::domain {

/// An absolute URL cut in two: `origin` ("scheme://authority") and `path` (path and query, e.g.
/// "/a?b"; empty when the URL has none). Both view the text given to split_url.
struct url_parts {
  std::string_view origin;
  std::string_view path;
};

/// Splits `url` after its authority. A URL without "://" has no origin: all of it is the path.
url_parts split_url(std::string_view url);

/// A `{name}` placeholder in a template: '{', one or more ASCII letters, digits or '_', '}'.
struct placeholder {
  std::size_t begin = 0; // the '{'
  std::size_t end = 0;   // one past the '}'
  std::string_view name;
};

/// The first placeholder of `text` that starts at or after `from`; a '{' that does not open a
/// placeholder is plain text.
std::optional<placeholder> next_placeholder(std::string_view text, std::size_t from = 0);

/// Calls `f(const placeholder&)` for each placeholder of `text`, in order.
template <class F> void for_each_placeholder(std::string_view text, F&& f) {
  for (auto ph = next_placeholder(text); ph; ph = next_placeholder(text, ph->end))
    f(*ph);
}

} // namespace outboxd::domain
