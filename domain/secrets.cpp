// Credential headers and their masking.
#include "domain/secrets.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace outboxd::domain {
namespace {

constexpr std::string_view credential_words[] = {"authorization", "token", "secret", "password",
                                                 "key"};
constexpr std::size_t shortest_masked = 6;

} // namespace

bool is_credential_header(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(std::begin(credential_words), std::end(credential_words),
                     [&](std::string_view w) { return lower.find(w) != std::string::npos; });
}

std::vector<std::string>
credential_values(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::vector<std::string> out;
  for (const auto& [name, value] : headers) {
    if (!is_credential_header(name))
      continue;
    if (value.size() >= shortest_masked)
      out.push_back(value);
    // "Bearer abc...": the token alone may come back too.
    auto space = value.find(' ');
    if (space != std::string::npos && value.size() - space - 1 >= shortest_masked)
      out.push_back(value.substr(space + 1));
  }
  // Longest first, so a value that contains another is masked whole.
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

namespace {

/// `text` with every occurrence of each secret replaced; says whether there was one.
bool replace_secrets(std::string& text, const std::vector<std::string>& secrets) {
  bool found = false;
  for (const auto& secret : secrets)
    for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3)) {
      text.replace(at, secret.size(), "***");
      found = true;
    }
  return found;
}

/// The characters of a JSON string whose inside (between its quotes) is `inside`, its escapes
/// decoded; nullopt when it is not a valid JSON string.
std::optional<std::string> json_unescape(std::string_view inside) {
  std::string literal;
  literal.reserve(inside.size() + 2);
  literal.append(1, '"').append(inside).append(1, '"');
  rapidjson::Document d;
  d.Parse(literal.data(), literal.size());
  if (d.HasParseError() || !d.IsString())
    return std::nullopt;
  return std::string(d.GetString(), d.GetStringLength());
}

/// `s` as the inside of a JSON string.
std::string json_escape(std::string_view s) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return std::string(out.GetString() + 1, out.GetSize() - 2);
}

} // namespace

std::string mask_secrets(std::string text, const std::vector<std::string>& secrets) {
  replace_secrets(text, secrets);
  if (secrets.empty() || text.find('\\') == std::string::npos)
    return text;
  // A partner may echo a credential inside a JSON string with escapes (a slash as backslash-slash,
  // any character as a backslash-u escape), which the raw text does not match and jsonb would
  // decode: each string with an escape is read, and written again, masked, when it holds one.
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (auto open = text.find('"'); open != std::string::npos; open = text.find('"', pos)) {
    auto close = open + 1;
    bool escaped = false;
    while (close < text.size() && text[close] != '"') {
      if (text[close] == '\\') {
        escaped = true;
        ++close;
      }
      ++close;
    }
    if (close >= text.size())
      break;
    out.append(text, pos, open + 1 - pos);
    std::string_view inside(text.data() + open + 1, close - open - 1);
    std::optional<std::string> decoded;
    if (escaped && (decoded = json_unescape(inside)) && replace_secrets(*decoded, secrets))
      out += json_escape(*decoded);
    else
      out += inside;
    out += '"';
    pos = close + 1;
  }
  out.append(text, pos);
  return out;
}

std::string mask_url_credentials(std::string_view url) {
  std::string out(url);
  const auto scheme_end = out.find("://");
  if (scheme_end != std::string::npos) {
    const auto authority = scheme_end + 3;
    const auto authority_end = std::min(out.find_first_of("/?#", authority), out.size());
    const auto at = out.rfind('@', authority_end - 1);
    if (at != std::string::npos && at >= authority) {
      const auto colon = out.find(':', authority);
      if (colon < at && colon + 1 < at)
        out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  const auto query = out.find('?');
  if (query == std::string::npos)
    return out;
  const auto fragment = std::min(out.find('#', query), out.size());
  std::string masked = out.substr(0, query + 1);
  for (std::size_t start = query + 1; start <= fragment;) {
    const auto end = std::min(out.find('&', start), fragment);
    const auto param = std::string_view(out).substr(start, end - start);
    const auto equals = param.find('=');
    if (equals != std::string_view::npos && equals + 1 < param.size() &&
        is_credential_header(param.substr(0, equals)))
      masked.append(param.substr(0, equals + 1)).append("***");
    else
      masked.append(param);
    if (end < fragment)
      masked += '&';
    start = end + 1;
  }
  return masked + out.substr(fragment);
}

} // namespace outboxd::domain
