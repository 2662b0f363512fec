// The documented JSONPath subset used by route conditions and revert extraction.
#pragma once

#include "domain/expected.hpp"

#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::domain {

/// A parsed path: `$` followed by any number of `.name`, `['name']` or `[index]` steps,
/// e.g. `$.transaction.id`, `$.items[0].sku`. Nothing else (no wildcards, filters or slices).
class json_path {
public:
  /// Parses `text`; the error says what is wrong and where.
  static expected<json_path> parse(std::string_view text);

  /// The value the path points at in `root`, or nullptr when any step is missing.
  const rapidjson::Value* find(const rapidjson::Value& root) const;

  const std::string& text() const { return text_; }

private:
  struct step {
    std::string key; // used when index < 0
    long index = -1;
  };
  std::string text_;
  std::vector<step> steps_;
};

} // namespace outboxd::domain
