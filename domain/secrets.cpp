// Credential headers and their masking.
#include "domain/secrets.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <optional>

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

int hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = static_cast<char>(c | 0x20);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/// The four hex digits at `s`, or -1.
long hex4(std::string_view s) {
  if (s.size() < 4)
    return -1;
  long v = 0;
  for (int i = 0; i < 4; ++i) {
    int d = hex_digit(s[i]);
    if (d < 0)
      return -1;
    v = v * 16 + d;
  }
  return v;
}

void append_utf8(std::string& out, long cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// The characters of a JSON string's inside (between its quotes), its escapes decoded; nullopt
/// for an escape JSON does not have.
std::optional<std::string> json_unescape(std::string_view in) {
  std::string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\') {
      out += in[i];
      continue;
    }
    if (++i == in.size())
      return std::nullopt;
    switch (in[i]) {
    case '"':
      out += '"';
      break;
    case '\\':
      out += '\\';
      break;
    case '/':
      out += '/';
      break;
    case 'b':
      out += '\b';
      break;
    case 'f':
      out += '\f';
      break;
    case 'n':
      out += '\n';
      break;
    case 'r':
      out += '\r';
      break;
    case 't':
      out += '\t';
      break;
    case 'u': {
      long cp = hex4(in.substr(i + 1));
      if (cp < 0)
        return std::nullopt;
      i += 4;
      if (cp >= 0xD800 && cp < 0xDC00 && in.substr(i + 1, 2) == "\\u") {
        long low = hex4(in.substr(i + 3));
        if (low >= 0xDC00 && low < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          i += 6;
        }
      }
      append_utf8(out, cp);
      break;
    }
    default:
      return std::nullopt;
    }
  }
  return out;
}

/// `s` as the inside of a JSON string.
std::string json_escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
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

} // namespace outboxd::domain
