// HTTP/1.1 message framing (RFC 9112 sections 6 and 7.1), for requests.
#include "http/request_framing.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>

namespace outboxd::http {
namespace {

using kind = request_frame::kind;
constexpr std::string_view crlf = "\r\n";
constexpr std::size_t max_chunk_line = 1024;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("-!#$%&'*+.^_`|~").find(c) != std::string_view::npos;
}

/// A field value holds visible characters, spaces, tabs and bytes over 0x7F (RFC 9110 5.5): a NUL
/// (where the library's reading would end the value, while a proxy reads on), a bare CR or
/// another control is refused.
bool is_field_value(std::string_view value) {
  return std::none_of(value.begin(), value.end(), [](char c) {
    auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && byte != '\t') || byte == 0x7f;
  });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::optional<std::size_t> parse_length(std::string_view text) {
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::size_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

/// The end of a chunked body that starts at `at`, or a verdict.
request_frame frame_chunked(std::string_view bytes, std::size_t at, std::size_t max_body) {
  std::size_t body = 0;
  for (;;) {
    auto line_end = bytes.find(crlf, at);
    if (line_end == std::string_view::npos)
      return {bytes.size() - at > max_chunk_line ? kind::malformed : kind::incomplete};
    if (line_end - at > max_chunk_line)
      return {kind::malformed};
    auto size_text = trim(bytes.substr(at, line_end - at));
    size_text = trim(size_text.substr(0, size_text.find(';'))); // chunk extensions
    std::size_t size = 0;
    auto [end, ec] =
        std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (size_text.empty() || size_text.size() > 15 || ec != std::errc() ||
        end != size_text.data() + size_text.size())
      return {kind::malformed};
    at = line_end + crlf.size();
    if (size == 0)
      break;
    body += size;
    if (body > max_body)
      return {kind::body_too_large};
    if (bytes.size() < at + size + crlf.size())
      return {kind::incomplete};
    if (bytes.substr(at + size, crlf.size()) != crlf)
      return {kind::malformed};
    at += size + crlf.size();
  }
  // Trailer fields, then the empty line.
  for (;;) {
    auto line_end = bytes.find(crlf, at);
    if (line_end == std::string_view::npos)
      return {bytes.size() - at > max_chunk_line ? kind::malformed : kind::incomplete};
    if (line_end == at)
      return {kind::complete, line_end + crlf.size()};
    at = line_end + crlf.size();
  }
}

} // namespace

request_frame frame_request(std::string_view bytes, std::size_t max_header_bytes,
                            std::size_t max_body_bytes) {
  auto head_end = bytes.substr(0, max_header_bytes).find("\r\n\r\n");
  if (head_end == std::string_view::npos)
    return {bytes.size() >= max_header_bytes ? kind::headers_too_large : kind::incomplete};
  auto body_start = head_end + 4;

  std::optional<std::size_t> content_length;
  bool chunked = false;
  bool expects_continue = false;
  int hosts = 0;
  auto line_start = bytes.find(crlf) + crlf.size(); // after the request line
  while (line_start < head_end + crlf.size()) {
    auto line_end = bytes.find(crlf, line_start);
    auto line = bytes.substr(line_start, line_end - line_start);
    line_start = line_end + crlf.size();
    // A field is a token, a colon and its value (RFC 9112 5.1): a line without a colon, a folded
    // line, or a name with a space before the colon ("Content-Length : 5") is refused, since
    // the library would skip it or read another name, and frame the body differently from a
    // proxy in front.
    auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return {kind::malformed};
    auto name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_token_char))
      return {kind::malformed};
    auto value = trim(line.substr(colon + 1));
    if (!is_field_value(value))
      return {kind::malformed};
    if (iequals(name, "Host") && ++hosts > 1) // which one names the server? (RFC 9112 3.2)
      return {kind::malformed};
    if (iequals(name, "Content-Length")) {
      auto length = parse_length(value);
      if (!length || (content_length && *content_length != *length))
        return {kind::malformed};
      content_length = length;
    } else if (iequals(name, "Transfer-Encoding")) {
      // Chunked alone, in one field: the library reads a body as chunked only when its first
      // Transfer-Encoding field says exactly that, and no other coding is undone here, so any
      // other list ("gzip, chunked", a second field) would be framed one way and read another.
      if (chunked || !iequals(value, "chunked"))
        return {kind::malformed};
      chunked = true;
    } else if (iequals(name, "Expect")) {
      expects_continue = iequals(value, "100-continue");
    }
  }
  if (chunked && content_length)
    return {kind::malformed};
  request_frame out;
  if (chunked) {
    out = frame_chunked(bytes, body_start, max_body_bytes);
    out.expects_continue = expects_continue && out.what == kind::incomplete;
    return out;
  }
  auto length = content_length.value_or(0);
  if (length > max_body_bytes)
    return {kind::body_too_large};
  if (bytes.size() < body_start + length)
    return {kind::incomplete, 0, expects_continue};
  return {kind::complete, body_start + length};
}

std::optional<std::string> head_as_sent(std::string_view request) {
  auto head = request.substr(0, request.find("\r\n\r\n") + crlf.size());
  auto line_start = head.find(crlf) + crlf.size();
  std::optional<std::string> out;
  while (line_start < head.size()) {
    auto line_end = head.find(crlf, line_start);
    auto line = head.substr(line_start, line_end - line_start);
    auto colon = line.find(':');
    auto name = line.substr(0, colon);
    auto value = line.substr(colon + 1);
    bool escape = value.find('%') != std::string_view::npos && !iequals(name, "Location");
    bool empty_key = trim(value).empty() && iequals(name, "Idempotency-Key");
    if ((escape || empty_key) && !out)
      out.emplace(head.substr(0, line_start));
    if (empty_key) {
      out->append(name).append(": %00\r\n");
    } else if (escape) {
      out->append(name).append(":");
      for (char ch : value) {
        if (ch == '%')
          out->append("%25");
        else
          out->push_back(ch);
      }
      out->append(crlf);
    } else if (out) {
      out->append(line).append(crlf);
    }
    line_start = line_end + crlf.size();
  }
  if (out)
    out->append(crlf);
  return out;
}

} // namespace outboxd::http
