// Delivery decisions: route conditions, URL filling, response classification and retry timing.
// Pure functions; the caller supplies the clock reading and the jitter.
#include "domain/delivery.hpp"

#include "domain/url.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <limits>

namespace outboxd::domain {
namespace {

std::string_view view(const rapidjson::Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

/// A whole string read as a number ("50", "-1.5", "1e3"); no blanks, signs other than a leading
/// '-', hex, inf or nan, so that only what a person would call a number counts.
std::optional<double> numeric_string(std::string_view s) {
  if (s.empty())
    return std::nullopt;
  double d = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(d))
    return std::nullopt;
  return d;
}

std::optional<double> as_number(const rapidjson::Value& v) {
  if (v.IsNumber())
    return v.GetDouble();
  if (v.IsString())
    return numeric_string(view(v));
  return std::nullopt;
}

std::optional<double> as_number(const condition_value& literal) {
  if (const auto* d = std::get_if<double>(&literal))
    return *d;
  if (const auto* s = std::get_if<std::string>(&literal))
    return numeric_string(*s);
  return std::nullopt;
}

/// eq semantics. A number on one side and a numeric string on the other compare as numbers in
/// both directions: configurations write 50 and "50" interchangeably (the loader does the same
/// for gt/gte/lt/lte).
bool equals(const rapidjson::Value& actual, const condition_value& literal) {
  if (actual.IsNull() || std::holds_alternative<std::monostate>(literal))
    return false;
  if (actual.IsNumber() || std::holds_alternative<double>(literal)) {
    auto a = as_number(actual);
    auto b = as_number(literal);
    return a && b && *a == *b;
  }
  if (const auto* b = std::get_if<bool>(&literal))
    return actual.IsBool() && actual.GetBool() == *b;
  if (const auto* s = std::get_if<std::string>(&literal))
    return actual.IsString() && view(actual) == *s;
  return false;
}

bool contains(const rapidjson::Value& actual, const condition_value& literal) {
  if (actual.IsString()) {
    const auto* s = std::get_if<std::string>(&literal);
    return s && view(actual).find(*s) != std::string_view::npos;
  }
  if (actual.IsArray()) {
    for (const auto& element : actual.GetArray())
      if (equals(element, literal))
        return true;
  }
  return false;
}

bool compare(const rapidjson::Value& actual, const condition_value& literal,
             condition_operator op) {
  auto a = as_number(actual);
  auto b = as_number(literal);
  if (!a || !b)
    return false;
  switch (op) {
  case condition_operator::gt:
    return *a > *b;
  case condition_operator::gte:
    return *a >= *b;
  case condition_operator::lt:
    return *a < *b;
  case condition_operator::lte:
    return *a <= *b;
  default:
    return false;
  }
}

std::string_view operator_name(condition_operator op) {
  return name_in(condition_operator_names, op);
}

std::string describe(const condition& c) {
  std::string text = fmt::format("{} {}", c.path.text(), operator_name(c.op));
  if (const auto* b = std::get_if<bool>(&c.value))
    text += *b ? " true" : " false";
  else if (const auto* d = std::get_if<double>(&c.value))
    text += fmt::format(" {}", *d);
  else if (const auto* s = std::get_if<std::string>(&c.value))
    text += fmt::format(" \"{}\"", *s);
  if (c.previous_destination)
    text += fmt::format(" (response of {})", *c.previous_destination);
  return text;
}

bool upper_case_equals(std::string_view text, std::string_view upper) {
  return text.size() == upper.size() &&
         std::equal(text.begin(), text.end(), upper.begin(), [](char a, char b) {
           return (a >= 'a' && a <= 'z' ? static_cast<char>(a - 'a' + 'A') : a) == b;
         });
}

// ASCII by hand: <cctype> follows the locale, and what gets encoded must not.
bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  // Howard Hinnant's algorithm: proleptic Gregorian calendar, 1970-01-01 is day 0.
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

bool leap_year(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/// Reads exactly `n` digits at `pos`.
std::optional<int> digits(std::string_view s, std::size_t pos, std::size_t n) {
  if (pos + n > s.size())
    return std::nullopt;
  int v = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9')
      return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

/// "Sun, 06 Nov 1994 08:49:37 GMT" (RFC 9110 IMF-fixdate, case-sensitive) as Unix milliseconds.
/// The day name is checked for spelling only: a sender with a wrong weekday still means the date.
std::optional<std::int64_t> parse_imf_fixdate(std::string_view s) {
  static constexpr std::array<std::string_view, 7> days = {"Mon", "Tue", "Wed", "Thu",
                                                           "Fri", "Sat", "Sun"};
  static constexpr std::array<std::string_view, 12> months = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  // "Sun, 06 Nov 1994 08:49:37 GMT" is exactly 29 characters.
  if (s.size() != 29 || s.substr(3, 2) != ", " || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
      s[19] != ':' || s[22] != ':' || s.substr(25) != " GMT")
    return std::nullopt;
  if (std::find(days.begin(), days.end(), s.substr(0, 3)) == days.end())
    return std::nullopt;
  auto month_it = std::find(months.begin(), months.end(), s.substr(8, 3));
  if (month_it == months.end())
    return std::nullopt;
  auto day = digits(s, 5, 2);
  auto year = digits(s, 12, 4);
  auto hour = digits(s, 17, 2);
  auto minute = digits(s, 20, 2);
  auto second = digits(s, 23, 2);
  if (!day || !year || !hour || !minute || !second)
    return std::nullopt;
  auto month = static_cast<unsigned>(month_it - months.begin()) + 1;
  static constexpr std::array<int, 12> month_days = {31, 28, 31, 30, 31, 30,
                                                     31, 31, 30, 31, 30, 31};
  int last_day = month_days[month - 1] + (month == 2 && leap_year(*year) ? 1 : 0);
  // Second 60 is a leap second, which RFC 9110 allows.
  if (*day < 1 || *day > last_day || *hour > 23 || *minute > 59 || *second > 60)
    return std::nullopt;
  std::int64_t days_since_epoch = days_from_civil(*year, month, static_cast<unsigned>(*day));
  std::int64_t seconds = days_since_epoch * 86400 + *hour * 3600 + *minute * 60 + *second;
  return seconds * 1000;
}

} // namespace

bool condition_holds(const condition& c, const rapidjson::Value* payload,
                     const previous_responses& previous) {
  const rapidjson::Value* root = payload;
  if (c.previous_destination) {
    auto it = previous.find(*c.previous_destination);
    root = it == previous.end() ? nullptr : it->second;
  }
  if (root == nullptr)
    return false;
  const rapidjson::Value* actual = c.path.find(*root);
  if (actual == nullptr || actual->IsNull())
    return false;
  switch (c.op) {
  case condition_operator::exists:
    return true;
  case condition_operator::eq:
    return equals(*actual, c.value);
  case condition_operator::ne:
    // Without a literal there is nothing to differ from: a broken condition never routes.
    return !std::holds_alternative<std::monostate>(c.value) && !equals(*actual, c.value);
  case condition_operator::contains:
    return contains(*actual, c.value);
  case condition_operator::gt:
  case condition_operator::gte:
  case condition_operator::lt:
  case condition_operator::lte:
    return compare(*actual, c.value, c.op);
  }
  return false;
}

route_choice choose_route(const destination& d, const rapidjson::Value* payload,
                          const previous_responses& previous) {
  for (const auto& r : d.routes)
    if (!r.when || condition_holds(*r.when, payload, previous))
      return {route_choice::kind::call, &r, {}};
  std::string conditions;
  for (const auto& r : d.routes) {
    if (!conditions.empty())
      conditions += "; ";
    conditions += describe(*r.when); // every route here has a condition, or it would have won
  }
  std::string reason = d.routes.empty()
                           ? fmt::format("destination {} has no routes", d.name)
                           : fmt::format("no route of {} matches: {}", d.name, conditions);
  if (d.required)
    return {route_choice::kind::fail, nullptr, fmt::format("{} is required; {}", d.name, reason)};
  return {route_choice::kind::skip, nullptr, std::move(reason)};
}

std::string percent_encode_segment(std::string_view value) {
  static constexpr char hex[] = "0123456789ABCDEF";
  // "." and ".." are dot-segments: a client or server would resolve them, so they are encoded.
  bool dots = value == "." || value == "..";
  std::string out;
  out.reserve(value.size() * 3);
  for (unsigned char c : value) {
    if (unreserved(c) && !dots) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0x0F];
    }
  }
  return out;
}

expected<std::string> fill_url(std::string_view url_template,
                               const std::map<std::string, std::string>& params) {
  std::string out;
  const std::size_t path = split_url(url_template).origin.size();
  std::size_t pos = 0;
  for (auto ph = next_placeholder(url_template); ph; ph = next_placeholder(url_template, pos)) {
    // A value in the scheme or authority would choose the host, which encoding cannot prevent.
    if (ph->begin < path)
      return error{fmt::format("url template '{}' has placeholder {{{}}} outside the path",
                               url_template, ph->name)};
    auto it = params.find(std::string(ph->name));
    if (it == params.end())
      return error{fmt::format("url placeholder {{{}}} has no value", ph->name)};
    // An empty segment would turn /orders/{id}/cancel into /orders//cancel: another resource.
    if (it->second.empty())
      return error{fmt::format("url placeholder {{{}}} has an empty value", ph->name)};
    out += url_template.substr(pos, ph->begin - pos);
    out += percent_encode_segment(it->second);
    pos = ph->end;
  }
  out += url_template.substr(pos);
  return out;
}

attempt_outcome classify(std::string_view method, std::optional<int> status) {
  if (!status)
    return attempt_outcome::retryable;
  int s = *status;
  if (s >= 200 && s <= 299)
    return attempt_outcome::success;
  if (s == 404 && upper_case_equals(method, "DELETE"))
    return attempt_outcome::success;
  if (s == 408 || s == 425 || s == 429 || (s >= 500 && s <= 599))
    return attempt_outcome::retryable;
  return attempt_outcome::non_retryable;
}

std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view header,
                                                           std::int64_t now_unix_ms) {
  constexpr std::int64_t max_ms = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t max_seconds = max_ms / 1000;
  auto first = header.find_first_not_of(" \t");
  if (first == std::string_view::npos)
    return std::nullopt;
  header = header.substr(first, header.find_last_not_of(" \t") - first + 1);
  if (header[0] >= '0' && header[0] <= '9') {
    std::int64_t seconds = 0;
    for (char c : header) {
      if (c < '0' || c > '9')
        return std::nullopt;
      int d = c - '0';
      seconds = seconds > (max_seconds - d) / 10 ? max_seconds : seconds * 10 + d;
    }
    return std::chrono::milliseconds(seconds * 1000);
  }
  auto at = parse_imf_fixdate(header);
  if (!at)
    return std::nullopt;
  if (*at <= now_unix_ms)
    return std::chrono::milliseconds(0);
  // `at` is a few centuries either side of 1970 at most; only an absurd `now` could overflow.
  if (now_unix_ms < 0 && *at > max_ms + now_unix_ms)
    return std::chrono::milliseconds(max_ms);
  return std::chrono::milliseconds(*at - now_unix_ms);
}

std::chrono::milliseconds retry_delay(int retry,
                                      std::optional<std::chrono::milliseconds> retry_after,
                                      std::chrono::milliseconds base, std::chrono::milliseconds max,
                                      double jitter) {
  using std::chrono::milliseconds;
  if (max <= milliseconds(0))
    return milliseconds(0);
  auto backoff = milliseconds(0);
  if (base > milliseconds(0)) {
    // NaN and out-of-range jitter are the caller's bug; they must still give a bounded delay.
    if (!(jitter >= 0.0))
      jitter = 0.0;
    jitter = std::min(jitter, 1.0);
    double factor = 0.5 + 0.5 * jitter;
    // In doubles: 2^(retry-1) overflows any integer after 63 retries, and a double that is too
    // large (or inf) just clamps to max.
    double delay =
        static_cast<double>(base.count()) * std::ldexp(1.0, std::max(retry, 1) - 1) * factor;
    backoff = delay < static_cast<double>(max.count())
                  ? milliseconds(static_cast<std::int64_t>(delay))
                  : max;
  }
  // A partner may ask for a longer wait, never a shorter one: "Retry-After: 0" (or a date in the
  // past) would spend the whole retry budget in milliseconds.
  return std::clamp(std::max(retry_after.value_or(milliseconds(0)), backoff), milliseconds(0), max);
}

int claim_sizing::base() const {
  return std::max(1, batch_size / pool_size);
}

int claim_sizing::next(int size, std::size_t claimed, std::chrono::nanoseconds took) const {
  if (claimed < static_cast<std::size_t>(size))
    return base();
  using seconds = std::chrono::duration<double>;
  auto paced = static_cast<double>(claimed) * seconds(batch_time).count() /
               std::max(seconds(took).count(), 1e-6);
  auto cap = std::min({size * 2, base() * 8, batch_size});
  return static_cast<int>(std::clamp(paced, 1.0, static_cast<double>(cap)));
}

} // namespace outboxd::domain
