// A value-or-error result for domain functions: outcomes are values, not exceptions.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace outboxd::domain {

/// Why a domain operation was refused, in words meant for the user (names the field or key).
struct error {
  std::string message;
};

/// Either a T or an error. Minimal on purpose: check `ok()`, then read `value()` or `err()`.
template <class T> class expected {
public:
  expected(T value) : v_(std::move(value)) {}
  expected(error e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const error& err() const { return std::get<1>(v_); }

private:
  std::variant<T, error> v_;
};

} // namespace outboxd::domain
