// Response bodies as data: JSON templates (simulator/responses.json) whose string values may
// name request-dependent values in braces. Pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::simulator {

/// The values one response fills in, each as JSON (for a whole-string placeholder) and as text
/// (inside a longer string).
class body_values {
public:
  void set(const std::string& name, std::string_view text);
  void set(const std::string& name, const char* text) { set(name, std::string_view(text)); }
  void set(const std::string& name, const std::string& text) { set(name, std::string_view(text)); }
  void set(const std::string& name, std::int64_t number);
  void set(const std::string& name, int number) { set(name, std::int64_t{number}); }
  void set(const std::string& name, double number);
  /// Already-serialised JSON (an object or array taken from the request, a decimal).
  void set_raw(const std::string& name, std::string json);

  struct value {
    std::string json;
    std::string text;
  };
  /// nullptr when `name` was not set.
  const value* find(std::string_view name) const;

private:
  std::map<std::string, value, std::less<>> values_;
};

/// The templates of one JSON document `{"name": template, ...}`. In a template, a string that is
/// exactly "{x}" becomes value x as JSON, and the member (or array element) is left out when x
/// is not set; "{x}" inside a longer string becomes x's text. Numbers are kept as written (12.50
/// stays 12.50).
class body_templates {
public:
  /// Throws std::invalid_argument when `json` is not an object of templates.
  explicit body_templates(std::string_view json);

  bool has(std::string_view name) const;
  std::vector<std::string> names() const;

  /// The body named `name` with `values` filled in; throws std::logic_error for an unknown
  /// template or a placeholder inside a string whose value is not set.
  std::string render(std::string_view name, const body_values& values) const;

  struct token {
    enum class kind {
      start_object,
      end_object,
      start_array,
      end_array,
      key,
      string,
      number,
      boolean,
      null
    };
    kind what;
    std::string text; // key, string, number ("true"/"false" for booleans)
  };

private:
  std::map<std::string, std::vector<token>, std::less<>> templates_;
};

/// The reference bodies compiled into the binary (simulator/responses.json).
const body_templates& reference_bodies();

} // namespace outboxd::simulator
