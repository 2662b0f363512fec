// Credentials a destination is configured with (an API key header, a bearer token) must not reach
// the audit or the log, even when a partner echoes them back in its answer.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outboxd::domain {

/// Whether a header of this name carries a credential: its name contains authorization, token,
/// secret, password or key (any case), e.g. Authorization, X-Api-Key.
bool is_credential_header(std::string_view name);

/// The values of the credential headers among `headers` that are long enough to mask without
/// hiding ordinary text (at least 6 bytes).
std::vector<std::string>
credential_values(const std::vector<std::pair<std::string, std::string>>& headers);

/// `text` with every occurrence of each of `secrets` replaced by "***".
std::string mask_secrets(std::string text, const std::vector<std::string>& secrets);

/// `url` with the credentials it may carry masked, as it is logged, stored in the audit and
/// shown: the password of its user info (`https://user:***@host/...`) and the value of each
/// query parameter whose name reads as a credential (is_credential_header: `?api_key=***`).
std::string mask_url_credentials(std::string_view url);

} // namespace outboxd::domain
