// Credential headers and their masking.
#include "domain/secrets.hpp"

#include <algorithm>
#include <cctype>

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

std::string mask_secrets(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& secret : secrets)
    for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
      text.replace(at, secret.size(), "***");
  return text;
}

} // namespace outboxd::domain
