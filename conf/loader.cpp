// Loads outboxd's configuration: built-in defaults, an optional file, DATABASE_URL and OUTBOXD_*
// variables and --set overrides, merged as JSON, then read into `settings` with every problem
// collected so that one start-up attempt shows all of them.
#include "conf/loader.hpp"

#include "conf/json_values.hpp"
#include "domain/json_parse.hpp"
#include "domain/json_path.hpp"
#include "domain/order.hpp"
#include "domain/revert.hpp"
#include "domain/routing.hpp"
#include "domain/secrets.hpp"
#include "simulator/knobs.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <libpq-fe.h>
#include <limits>
#include <memory>
#include <openssl/ssl.h>
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <set>
#include <unistd.h>
#include <utility>

namespace outboxd::conf::embedded {
std::vector<std::pair<std::string_view, std::string_view>> files();
} // namespace outboxd::conf::embedded

namespace outboxd::conf {
namespace {

using rapidjson::Document;
using rapidjson::Value;
using allocator = Document::AllocatorType;

constexpr unsigned parse_flags = rapidjson::kParseCommentsFlag |
                                 rapidjson::kParseTrailingCommasFlag |
                                 rapidjson::kParseValidateEncodingFlag;
/// A configuration, certificate or key file larger than this is refused unread.
constexpr std::size_t max_file_bytes = std::size_t{16} << 20;
constexpr std::string_view defaults_name = "application.json";
constexpr std::string_view defaults_source = "built-in application.json";
constexpr std::string_view base_url_reference = "${simulator.baseUrl}";
constexpr std::string_view env_prefix = "OUTBOXD_";

constexpr std::string_view http_methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};
constexpr std::int64_t int_max = std::numeric_limits<int>::max();

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The form keys are compared in by overrides: OUTBOXD_OUTBOX_POOLSIZE must find "poolSize" and
// OUTBOXD_SIMULATOR_SERVICES_BILLING_CHARGE_... must find "billing.charge".
std::string normalise_key(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '.' && c != '_' && c != '-')
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    auto end = s.find(sep, start);
    out.emplace_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos)
      return out;
    start = end + 1;
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i ? std::string(sep) : std::string()) + parts[i];
  return out;
}

std::string_view name_of(const Value& name) {
  return {name.GetString(), name.GetStringLength()};
}

std::string_view string_of(const Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

std::string child_path(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

std::string index_path(std::string_view parent, std::size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

Value* member(Value& object, std::string_view key) {
  if (!object.IsObject())
    return nullptr;
  for (auto& m : object.GetObject())
    if (name_of(m.name) == key)
      return &m.value;
  return nullptr;
}

const Value* member(const Value& object, std::string_view key) {
  return member(const_cast<Value&>(object), key);
}

std::string compact_json(const Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  return {buffer.GetString(), buffer.GetSize()};
}

std::string quoted(std::string_view s) {
  Value v(rapidjson::StringRef(s.data(), s.size()));
  return show(v);
}

/// Whether `host` is something to listen on: an IPv4 or IPv6 address (bracketed or not), or a
/// host name of letters, digits and inner hyphens, whose last label is not all digits (so that
/// 256.1.1.1 is a bad address, not a name).
bool is_host_name_or_address(std::string_view host) {
  std::string text(host.starts_with('[') && host.ends_with(']') && host.size() > 2
                       ? host.substr(1, host.size() - 2)
                       : host);
  in6_addr v6;
  in_addr v4;
  if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1 || ::inet_pton(AF_INET, text.c_str(), &v4) == 1)
    return true;
  if (text.empty() || text.size() > 253)
    return false;
  std::string_view rest = text;
  std::string_view label;
  while (!rest.empty()) {
    auto dot = rest.find('.');
    label = rest.substr(0, dot);
    rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (unsigned char c : label)
      if (!std::isalnum(c) && c != '-')
        return false;
    if (dot != std::string_view::npos && rest.empty())
      return false; // a trailing dot
  }
  return !std::all_of(label.begin(), label.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::string ms_text(milliseconds ms) {
  return fmt::format("{}ms", ms.count());
}

std::optional<std::int64_t> parse_int64(std::string_view text) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return std::nullopt;
  return v;
}

std::optional<std::uint64_t> parse_uint64(std::string_view text) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

// "must be > 0" for the common too-small case, as people say it; the full range otherwise.
std::string range_rule(std::int64_t value, std::int64_t lo, std::int64_t hi) {
  if (value < lo && lo == 1)
    return "must be > 0";
  if (hi == std::numeric_limits<std::int64_t>::max() || hi == int_max)
    return fmt::format("must be >= {}", lo);
  return fmt::format("must be between {} and {}", lo, hi);
}

std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  return {line, offset - line_start + 1};
}

/// The first key given twice in one object of `v` (at any depth), as a path ("outbox.poolSize").
std::optional<std::string> duplicate_key(const Value& v, const std::string& path) {
  if (v.IsArray()) {
    for (rapidjson::SizeType i = 0; i < v.Size(); ++i)
      if (auto d = duplicate_key(v[i], fmt::format("{}[{}]", path, i)))
        return d;
  }
  if (!v.IsObject())
    return std::nullopt;
  std::set<std::string_view> seen;
  for (const auto& m : v.GetObject()) {
    std::string_view name(m.name.GetString(), m.name.GetStringLength());
    auto here = path.empty() ? std::string(name) : fmt::format("{}.{}", path, name);
    if (!seen.insert(name).second)
      return here;
    if (auto d = duplicate_key(m.value, here))
      return d;
  }
  return std::nullopt;
}

bool parse_json(std::string_view text, std::string_view source, Document& doc,
                std::vector<std::string>& errors) {
  auto error = domain::parse_json_bounded<parse_flags>(doc, text);
  if (!error) {
    // The parser keeps both; which one a reader takes is a guess the file's author cannot see.
    if (auto key = duplicate_key(doc, "")) {
      errors.push_back(fmt::format("{}: {} is given more than once", source, *key));
      return false;
    }
    return true;
  }
  auto [line, column] = line_and_column(text, error->offset);
  errors.push_back(fmt::format("{}:{}:{}: {}", source, line, column, error->message));
  return false;
}

// Why libpq would refuse `url` as a connection string (a postgresql:// URI or key=value pairs),
// with the string's password masked wherever libpq quotes it; nullopt when it parses (or is empty:
// the PG* variables then say where the database is).
std::optional<std::string> connection_string_problem(const std::string& url) {
  if (url.empty())
    return std::nullopt;
  char* error = nullptr;
  PQconninfoOption* options = ::PQconninfoParse(url.c_str(), &error);
  if (options) {
    // libpq reads these options' values only when it connects, where a bad one would be taken
    // for an unreachable database and retried until startupTimeout.
    static const std::pair<const char*, std::vector<std::string_view>> enumerated[] = {
        {"sslmode", {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}},
        {"gssencmode", {"disable", "prefer", "require"}},
        {"channel_binding", {"disable", "prefer", "require"}},
        {"target_session_attrs",
         {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}},
    };
    std::optional<std::string> problem;
    for (auto* o = options; o->keyword && !problem; ++o)
      for (const auto& [keyword, values] : enumerated)
        if (o->val && std::string_view(o->keyword) == keyword &&
            std::find(values.begin(), values.end(), o->val) == values.end())
          problem = fmt::format("invalid {} value \"{}\" (one of {})", keyword, o->val,
                                fmt::join(values, ", "));
    ::PQconninfoFree(options);
    return problem;
  }
  std::string why = error ? error : "out of memory";
  ::PQfreemem(error);
  while (!why.empty() && std::isspace(static_cast<unsigned char>(why.back())))
    why.pop_back();
  // libpq quotes the part it could not read: mask the password inside the quotes (the whole
  // string masked as the start-up log shows it, or the user:password@ of a URI it stopped in).
  auto scheme = url.find("://");
  auto at = url.find('@', scheme == std::string::npos ? 0 : scheme + 3);
  auto colon = scheme == std::string::npos ? std::string::npos : url.find(':', scheme + 3);
  auto password = at != std::string::npos && colon != std::string::npos && colon < at
                      ? url.substr(colon + 1, at - colon - 1)
                      : std::string();
  std::string shown;
  for (std::size_t open = why.find('"'); open != std::string::npos; open = why.find('"')) {
    auto close = why.find('"', open + 1);
    if (close == std::string::npos)
      break;
    auto quoted = why.substr(open + 1, close - open - 1);
    quoted = quoted == url ? mask_database_url(url) : quoted;
    auto userinfo = ':' + password + '@';
    for (auto p = password.empty() ? std::string::npos : quoted.find(userinfo);
         p != std::string::npos; p = quoted.find(userinfo, p + 5))
      quoted.replace(p, userinfo.size(), ":***@");
    shown += why.substr(0, open + 1) + quoted + '"';
    why.erase(0, close + 1);
  }
  return shown + why;
}

std::optional<std::string> read_file(const std::string& path, std::string& why) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  std::string text;
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
    text.append(buffer, n);
    if (text.size() > max_file_bytes) { // /dev/zero, or a log file named by mistake
      why = fmt::format("larger than {} MiB", max_file_bytes >> 20);
      return std::nullopt;
    }
  }
  if (std::ferror(file.get())) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  return text;
}

// Why files cannot be written into the folder `dir`, or nullopt. The folder is made when it is
// missing, and a probe file is created and removed, so that an export that could never succeed
// stops the start instead of failing every retention run.
std::optional<std::string> unwritable(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return ec.message();
  if (!std::filesystem::is_directory(dir, ec))
    return "it is not a folder";
  auto probe = dir + "/.outboxd-write-check-" + std::to_string(::getpid());
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(probe.c_str(), "wb"),
                                                       &std::fclose);
  if (!file)
    return std::strerror(errno);
  file.reset();
  std::filesystem::remove(probe, ec);
  return std::nullopt;
}

// Why a certificate or key file cannot serve, or nullopt: it must be a readable file in PEM form
// (what the client hands to TLS).
std::optional<std::string> pem_file_problem(const std::string& path) {
  std::string why;
  auto text = read_file(path, why);
  if (!text)
    return why;
  if (text->find("-----BEGIN ") == std::string::npos)
    return std::string("not a PEM file (no -----BEGIN line)");
  return std::nullopt;
}

// Why a certificate chain and its private key cannot serve TLS together, or nullopt.
std::optional<std::string> tls_pair_problem(const std::string& cert, const std::string& key) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        SSL_CTX_free);
  if (!ctx)
    return std::string("OpenSSL could not start");
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    return std::string("the certificate does not load");
  // OpenSSL checks here that the key belongs to the certificate, too.
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1)
    return std::string("the private key does not load or does not belong to the certificate");
  return std::nullopt;
}

bool parse_sha256(std::string_view hex, std::array<unsigned char, 32>& out) {
  if (hex.size() != 64)
    return false;
  for (std::size_t i = 0; i < 32; ++i) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, value, 16);
    if (ec != std::errc() || end != hex.data() + 2 * i + 2)
      return false;
    out[i] = static_cast<unsigned char>(value);
  }
  return true;
}

// Objects merge key by key; anything else, arrays included, replaces: a file can shorten a list.
void merge(Value& target, const Value& source, allocator& alloc) {
  for (const auto& m : source.GetObject()) {
    Value* existing = member(target, name_of(m.name));
    if (!existing)
      target.AddMember(Value(m.name, alloc), Value(m.value, alloc), alloc);
    else if (existing->IsObject() && m.value.IsObject())
      merge(*existing, m.value, alloc);
    else
      existing->CopyFrom(m.value, alloc);
  }
}

// A destination a file says where to call (`url` or `routes`) is the file's, whole: it replaces
// the built-in one of that name instead of merging into it, which kept the demo's revert (aimed
// at the simulator, so that a compensation "released" a reservation the user's partner never
// heard of) and its conditions. A file that only tunes a built-in one (its timeout, headers,
// breaker) still merges into it.
void drop_redefined_destinations(Value& defaults, const Value& file) {
  const Value* http = member(file, "http");
  const Value* routes = http ? member(*http, "routes") : nullptr;
  Value* http_defaults = member(defaults, "http");
  Value* built_in = http_defaults ? member(*http_defaults, "routes") : nullptr;
  if (!routes || !routes->IsObject() || !built_in)
    return;
  for (const auto& m : routes->GetObject())
    if (m.value.IsObject() && (member(m.value, "url") || member(m.value, "routes")))
      built_in->RemoveMember(m.name);
}

struct override_target {
  Value* value = nullptr; // the existing value reached, or the deepest object on the way
  std::string path;       // the key path of `value`, as spelt in the document
  std::size_t consumed = 0;
};

// Walks `segments` down from `root`. At each object the longest run of segments whose
// concatenation matches a key (compared normalised) wins, which is what lets "billing.charge" or
// "poolSize" be named by separate or differently cased segments.
override_target resolve(Value& root, const std::vector<std::string>& segments) {
  override_target t{&root, "", 0};
  while (t.consumed < segments.size()) {
    Value& current = *t.value;
    bool found = false;
    if (current.IsObject()) {
      for (std::size_t end = segments.size(); end > t.consumed && !found; --end) {
        std::string wanted;
        for (std::size_t i = t.consumed; i < end; ++i)
          wanted += normalise_key(segments[i]);
        if (wanted.empty())
          continue;
        for (auto& m : current.GetObject())
          if (normalise_key(name_of(m.name)) == wanted) {
            t.path = child_path(t.path, name_of(m.name));
            t.value = &m.value;
            t.consumed = end;
            found = true;
            break;
          }
      }
    } else if (current.IsArray()) {
      auto index = parse_int64(segments[t.consumed]);
      if (index && *index >= 0 && static_cast<std::uint64_t>(*index) < current.Size()) {
        t.path = index_path(t.path, static_cast<std::size_t>(*index));
        t.value = &current[static_cast<rapidjson::SizeType>(*index)];
        ++t.consumed;
        found = true;
      }
    }
    if (!found)
      break;
  }
  return t;
}

// Text that is not valid JSON is a string, so `--set admin.token=abc` needs no quotes.
void set_json_or_string(Value& target, std::string_view text, allocator& alloc) {
  Document parsed;
  if (domain::parse_json_bounded<parse_flags>(parsed, text))
    target.SetString(text.data(), static_cast<rapidjson::SizeType>(text.size()), alloc);
  else
    target.CopyFrom(parsed, alloc);
}

std::optional<bool> parse_bool(std::string_view text) {
  auto t = lowercase(text);
  if (t == "true" || t == "1" || t == "yes")
    return true;
  if (t == "false" || t == "0" || t == "no")
    return false;
  return std::nullopt;
}

// Types the override text after the value it replaces, so "8" stays a number and "abc" for a
// port is refused here, with the variable named, rather than later as a confusing type error.
void set_typed(Value& target, std::string_view text, const std::string& path,
               std::string_view source, allocator& alloc, std::vector<std::string>& errors) {
  if (target.IsNumber()) {
    if (auto i = parse_int64(text))
      target.SetInt64(*i);
    else if (auto u = parse_uint64(text))
      target.SetUint64(*u);
    else if (auto d = parse_double(text))
      target.SetDouble(*d);
    else
      errors.push_back(
          fmt::format("{} must be a number, got {} (from {})", path, quoted(text), source));
  } else if (target.IsBool()) {
    if (auto b = parse_bool(text))
      target.SetBool(*b);
    else
      errors.push_back(
          fmt::format("{} must be true or false, got {} (from {})", path, quoted(text), source));
  } else if (target.IsString()) {
    target.SetString(text.data(), static_cast<rapidjson::SizeType>(text.size()), alloc);
  } else {
    set_json_or_string(target, text, alloc);
  }
}

void apply_environment(Document& doc, const std::map<std::string, std::string>& environment,
                       std::vector<std::string>& errors) {
  auto& alloc = doc.GetAllocator();
  // An empty DATABASE_URL is treated as unset: compose files and CI often pass variables through
  // empty, and that must not wipe a url from the configuration file.
  if (auto it = environment.find("DATABASE_URL"); it != environment.end() && !it->second.empty()) {
    if (!doc.HasMember("database") || !doc["database"].IsObject())
      errors.push_back("DATABASE_URL is set but database is not an object");
    else if (Value* url = member(doc["database"], "url"))
      url->SetString(it->second.data(), static_cast<rapidjson::SizeType>(it->second.size()), alloc);
    else
      doc["database"].AddMember("url", Value(it->second, alloc), alloc);
  }
  for (const auto& [name, text] : environment) {
    if (name.rfind(env_prefix, 0) != 0)
      continue;
    std::vector<std::string> segments;
    for (auto& s : split(std::string_view(name).substr(env_prefix.size()), '_'))
      if (!s.empty())
        segments.push_back(lowercase(s));
    auto target = resolve(doc, segments);
    if (segments.empty() || target.consumed < segments.size()) {
      errors.push_back(
          fmt::format("environment variable {} does not name a configuration key", name));
      continue;
    }
    // As for DATABASE_URL: compose files pass variables through empty, meaning "not set". Only a
    // string key can be set to the empty string this way.
    if (text.empty() && !target.value->IsString())
      continue;
    set_typed(*target.value, text, target.path, name, alloc, errors);
  }
}

void apply_set(Document& doc, const std::string& option, std::vector<std::string>& errors) {
  auto& alloc = doc.GetAllocator();
  auto eq = option.find('=');
  if (eq == std::string::npos) {
    errors.push_back(fmt::format("--set {} must be key=value, e.g. outbox.poolSize=8", option));
    return;
  }
  std::string_view key = std::string_view(option).substr(0, eq);
  std::string_view text = std::string_view(option).substr(eq + 1);
  auto segments = split(key, '.');
  if (std::any_of(segments.begin(), segments.end(), [](auto& s) { return s.empty(); })) {
    errors.push_back(
        fmt::format("--set {}: '{}' is not a key path like outbox.poolSize", option, key));
    return;
  }
  auto source = "--set " + option;
  auto target = resolve(doc, segments);
  if (target.consumed == segments.size()) {
    set_typed(*target.value, text, target.path, source, alloc, errors);
    return;
  }
  if (!target.value->IsObject()) {
    errors.push_back(fmt::format("--set {}: {} is not an object, so it has no key '{}'", option,
                                 target.path, segments[target.consumed]));
    return;
  }
  // The rest of the path names keys that do not exist yet (a header, a new destination): create
  // them as spelt, since their names are data.
  Value* current = target.value;
  for (std::size_t i = target.consumed; i < segments.size(); ++i) {
    Value name(segments[i], alloc);
    current->AddMember(name, Value(rapidjson::kObjectType), alloc);
    current = &(current->MemberEnd() - 1)->value;
  }
  set_json_or_string(*current, text, alloc);
}

struct base_url_state {
  bool given = false;    // the configuration set a non-empty simulator.baseUrl
  bool resolved = false; // references to it have been replaced
};

void replace_base_url(Value* v, std::string_view base, allocator& alloc) {
  if (!v || !v->IsString())
    return;
  std::string text(string_of(*v));
  bool changed = false;
  for (auto pos = text.find(base_url_reference); pos != std::string::npos;
       pos = text.find(base_url_reference, pos + base.size())) {
    text.replace(pos, base_url_reference.size(), base);
    changed = true;
  }
  if (changed)
    v->SetString(text, alloc);
}

void replace_in_revert(Value* revert, std::string_view base, allocator& alloc) {
  if (revert && revert->IsObject())
    replace_base_url(member(*revert, "url"), base, alloc);
}

base_url_state resolve_base_url(Document& doc) {
  base_url_state state;
  auto& alloc = doc.GetAllocator();
  Value* simulator = member(doc, "simulator");
  if (!simulator || !simulator->IsObject())
    return state;
  Value* base_value = member(*simulator, "baseUrl");
  std::string base;
  if (base_value && !base_value->IsString())
    return state;
  if (base_value && base_value->GetStringLength() > 0) {
    state.given = true;
    base = string_of(*base_value);
  } else {
    Value* server = member(doc, "server");
    const Value* port = server ? member(*server, "port") : nullptr;
    const Value* host_value = server ? member(*server, "host") : nullptr;
    if (!port || !port->IsInt64() || port->GetInt64() < 1 || port->GetInt64() > 65535)
      return state; // server.port is reported by validation; a URL made from it would only add
                    // noise
    std::string host =
        host_value && host_value->IsString() ? std::string(string_of(*host_value)) : std::string();
    // A wildcard bind address is not something to connect to; loopback reaches it.
    if (host.empty() || host == "0.0.0.0" || host == "::")
      host = "127.0.0.1";
    if (host.find(':') != std::string::npos && host.front() != '[')
      host = "[" + host + "]";
    // A listener with a certificate speaks HTTPS only.
    const Value* tls = server ? member(*server, "tls") : nullptr;
    const Value* cert = tls && tls->IsObject() ? member(*tls, "certFile") : nullptr;
    bool https = cert && cert->IsString() && cert->GetStringLength() > 0;
    base = fmt::format("{}://{}:{}", https ? "https" : "http", host, port->GetInt64());
  }
  if (!base.empty() && base.back() == '/')
    base.pop_back();
  if (base_value)
    base_value->SetString(base, alloc);
  else
    simulator->AddMember("baseUrl", Value(base, alloc), alloc);

  Value* http = member(doc, "http");
  Value* routes = http ? member(*http, "routes") : nullptr;
  if (routes && routes->IsObject())
    for (auto& d : routes->GetObject()) {
      if (!d.value.IsObject())
        continue;
      replace_base_url(member(d.value, "url"), base, alloc);
      replace_in_revert(member(d.value, "revert"), base, alloc);
      if (Value* headers = member(d.value, "headers"); headers && headers->IsObject())
        for (auto& h : headers->GetObject())
          replace_base_url(&h.value, base, alloc);
      if (Value* list = member(d.value, "routes"); list && list->IsArray())
        for (auto& r : list->GetArray())
          if (r.IsObject()) {
            replace_base_url(member(r, "url"), base, alloc);
            replace_in_revert(member(r, "revert"), base, alloc);
          }
    }
  state.resolved = true;
  return state;
}

std::string effective_json(const Document& doc) {
  Document copy;
  copy.CopyFrom(doc, copy.GetAllocator());
  auto& alloc = copy.GetAllocator();
  Value* database = member(copy, "database");
  if (Value* url = database ? member(*database, "url") : nullptr; url && url->IsString())
    url->SetString(mask_database_url(string_of(*url)), alloc);
  Value* admin = member(copy, "admin");
  if (Value* token = admin ? member(*admin, "token") : nullptr;
      token && !(token->IsString() && token->GetStringLength() == 0))
    token->SetString("***", alloc);
  Value* auth = member(copy, "auth");
  if (Value* tokens = auth ? member(*auth, "tokens") : nullptr; tokens && tokens->IsArray()) {
    for (auto& t : tokens->GetArray())
      if (Value* hash = t.IsObject() ? member(t, "sha256") : nullptr; hash && hash->IsString())
        hash->SetString(std::string(string_of(*hash).substr(0, 8)) + "...", alloc);
  } else if (tokens) {
    tokens->SetString("***", alloc); // not a list: perhaps a token pasted in by mistake
  }
  Value* http = member(copy, "http");
  Value* routes = http ? member(*http, "routes") : nullptr;
  // A URL's password and credential parameters (a route's, a revert's): masked like headers.
  auto mask_url = [&alloc](Value& holder) {
    if (Value* url = holder.IsObject() ? member(holder, "url") : nullptr; url && url->IsString())
      url->SetString(domain::mask_url_credentials(string_of(*url)), alloc);
    if (Value* revert = holder.IsObject() ? member(holder, "revert") : nullptr)
      if (Value* url = revert->IsObject() ? member(*revert, "url") : nullptr;
          url && url->IsString())
        url->SetString(domain::mask_url_credentials(string_of(*url)), alloc);
  };
  if (routes && routes->IsObject())
    for (auto& d : routes->GetObject()) {
      if (Value* headers = member(d.value, "headers"); headers && headers->IsObject())
        for (auto& h : headers->GetObject())
          if (domain::is_credential_header(name_of(h.name)))
            h.value.SetString("***", alloc);
      mask_url(d.value);
      if (Value* conditional = d.value.IsObject() ? member(d.value, "routes") : nullptr;
          conditional && conditional->IsArray())
        for (auto& r : conditional->GetArray())
          mask_url(r);
    }
  rapidjson::StringBuffer buffer;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> writer(buffer);
  writer.SetIndent(' ', 2);
  copy.Accept(writer);
  return {buffer.GetString(), buffer.GetSize()};
}

// Why `url` cannot be called, or nullopt when it is fine. `{name}` placeholders are allowed in
// the path and query only: the authority must be known without a stored response.
std::optional<std::string> url_problem(std::string_view url) {
  if (url.find("${") != std::string_view::npos)
    return "only ${simulator.baseUrl} is substituted";
  std::size_t start = 0;
  if (url.rfind("http://", 0) == 0)
    start = 7;
  else if (url.rfind("https://", 0) == 0)
    start = 8;
  else
    return "it must start with http:// or https://";
  if (std::any_of(url.begin(), url.end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
    return "it contains whitespace";
  if (url.find('#') != std::string_view::npos)
    return "it contains '#'";
  auto end = url.find_first_of("/?", start);
  auto authority = url.substr(start, end == std::string_view::npos ? end : end - start);
  if (authority.find_first_of("{}") != std::string_view::npos)
    return "{placeholders} are allowed only in the path";
  if (auto at = authority.rfind('@'); at != std::string_view::npos)
    authority.remove_prefix(at + 1);
  std::string_view host, rest;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return "the IPv6 host has no ']'";
    host = authority.substr(1, close - 1);
    rest = authority.substr(close + 1);
  } else {
    auto colon = authority.find(':');
    host = authority.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  if (host.empty())
    return "the host is empty";
  if (!rest.empty()) {
    auto port = rest.front() == ':' ? parse_int64(rest.substr(1)) : std::nullopt;
    if (!port || *port < 1 || *port > 65535)
      return "the port must be 1..65535";
  }
  return std::nullopt;
}

// Reads one JSON object and remembers which keys were asked for, so that the rest can be reported:
// a misspelt key must not silently fall back to its default.
class object_reader {
public:
  object_reader(const Value& object, std::string path) : object_(object), path_(std::move(path)) {}

  const Value* get(std::string_view key) {
    asked_.emplace_back(key);
    return member(object_, key);
  }
  std::string path(std::string_view key) const { return child_path(path_, key); }

  void report_unknown(std::vector<std::string>& errors) const {
    for (const auto& m : object_.GetObject()) {
      auto name = name_of(m.name);
      if (std::find(asked_.begin(), asked_.end(), name) == asked_.end())
        errors.push_back(fmt::format("unknown key {}{}", child_path(path_, name),
                                     suggestion(name, {asked_.begin(), asked_.end()})));
    }
  }

private:
  const Value& object_;
  std::string path_;
  std::vector<std::string> asked_;
};

class settings_reader {
public:
  settings_reader(std::vector<std::string>& errors, base_url_state base_url)
      : errors_(errors), base_url_(base_url) {}

  settings read(const Value& root) {
    settings s;
    auto o = object(root, "");
    if (!o)
      return s;
    section(*o, "server", [&](object_reader& r) { read_server(r, s.server); });
    section(*o, "database", [&](object_reader& r) { read_database(r, s.database); });
    section(*o, "outbox", [&](object_reader& r) { read_outbox(r, s.outbox); });
    section(*o, "dlq", [&](object_reader& r) {
      integer(r, "maxRetries", s.dlq.max_retries, 0, 1000);
      if (const Value* b = r.get("backoff"))
        read_backoff(*b, r.path("backoff"), s.dlq.backoff);
      duration(r, "retryFor", s.dlq.retry_for, true);
      duration(r, "retention", s.dlq.retention, false);
    });
    section(*o, "audit", [&](object_reader& r) {
      duration(r, "retention", s.audit.retention, false);
      if (string(r, "exportDir", s.audit.export_dir) && !s.audit.export_dir.empty())
        if (auto why = unwritable(s.audit.export_dir))
          fail(fmt::format("{} cannot be written: {}", r.path("exportDir"), *why));
    });
    section(*o, "orders",
            [&](object_reader& r) { duration(r, "retention", s.orders.retention, false); });
    section(*o, "http", [&](object_reader& r) { read_http(r, s.http); });
    section(*o, "simulator", [&](object_reader& r) { read_simulator(r, s.simulator); });
    section(*o, "auth", [&](object_reader& r) { read_auth(r, s.auth); });
    section(*o, "admin", [&](object_reader& r) { string(r, "token", s.admin.token); });
    section(*o, "log", [&](object_reader& r) {
      choice(r, "level", s.log.level,
             {{"debug", log_level::debug},
              {"info", log_level::info},
              {"warn", log_level::warn},
              {"error", log_level::error}});
      choice(r, "format", s.log.format, {{"text", log_format::text}, {"json", log_format::json}});
    });
    o->report_unknown(errors_);
    check_time_budgets(s);
    check_exposure(s);
    return s;
  }

private:
  /// Rules between keys of different sections: a retry budget in time must allow one backoff,
  /// and a call must fit in a lease (the workers renew the lease before each call, so one call
  /// is what has to fit).
  void check_time_budgets(const settings& s) {
    auto at_least_one_backoff = [&](const std::string& key, milliseconds retry_for,
                                    const std::string& base_key, milliseconds base) {
      if (retry_for < base)
        fail(fmt::format("{} ({}) must be at least {} ({}): not even one retry would fit", key,
                         ms_text(retry_for), base_key, ms_text(base)));
    };
    at_least_one_backoff("outbox.retryFor", s.outbox.retry_for, "outbox.backoff.base",
                         s.outbox.backoff.base);
    at_least_one_backoff("dlq.retryFor", s.dlq.retry_for, "dlq.backoff.base", s.dlq.backoff.base);
    for (const auto& [name, d] : s.http.destinations) {
      auto key = "http.routes." + name;
      if (d.retry_for) {
        at_least_one_backoff(key + ".retryFor", *d.retry_for, "outbox.backoff.base",
                             s.outbox.backoff.base);
        at_least_one_backoff(key + ".retryFor", *d.retry_for, "dlq.backoff.base",
                             s.dlq.backoff.base);
      }
      if (d.timeout >= s.outbox.lease_timeout)
        fail(fmt::format("{}.timeout ({}) must be shorter than outbox.leaseTimeout ({}): a call "
                         "would outlive the lease of its event",
                         key, ms_text(d.timeout), ms_text(s.outbox.lease_timeout)));
    }
  }

  /// A listener other machines can reach must know who is calling, unless told it need not.
  void check_exposure(const settings& s) {
    if (!is_host_name_or_address(s.server.host) || is_loopback_host(s.server.host) ||
        !s.auth.tokens.empty() || !s.admin.token.empty() || s.auth.allow_anonymous)
      return;
    fail(fmt::format(
        "server.host {} can be reached from other machines and no token is configured: set "
        "auth.tokens (or OUTBOXD_AUTH_TOKENS), or set auth.allowAnonymous to true to serve "
        "everyone without authentication",
        s.server.host));
  }

  void fail(std::string message) { errors_.push_back(std::move(message)); }

  std::optional<object_reader> object(const Value& v, const std::string& path) {
    if (v.IsObject())
      return object_reader(v, path);
    fail(path.empty() ? fmt::format("the configuration must be a JSON object, got {}", show(v))
                      : fmt::format("{} must be an object, got {}", path, show(v)));
    return std::nullopt;
  }

  template <class F> void section(object_reader& parent, std::string_view key, F&& read) {
    if (const Value* v = parent.get(key))
      if (auto o = object(*v, parent.path(key))) {
        read(*o);
        o->report_unknown(errors_);
      }
  }

  // The scalar readers leave `out` (the struct default) alone when the key is absent and return
  // false only when the key is present and wrong.
  template <class T>
  bool integer(object_reader& o, std::string_view key, T& out, std::int64_t lo, std::int64_t hi) {
    const Value* v = o.get(key);
    if (!v)
      return true;
    auto i = integer_of(*v);
    if (!i) {
      fail(fmt::format("{} must be an integer, got {}", o.path(key), show(*v)));
      return false;
    }
    if (*i < lo || *i > hi) {
      fail(fmt::format("{} {}, got {}", o.path(key), range_rule(*i, lo, hi), show(*v)));
      return false;
    }
    out = static_cast<T>(*i);
    return true;
  }

  bool number(object_reader& o, std::string_view key, double& out, double lo, double hi) {
    const Value* v = o.get(key);
    if (!v)
      return true;
    if (!v->IsNumber()) {
      fail(fmt::format("{} must be a number, got {}", o.path(key), show(*v)));
      return false;
    }
    if (v->GetDouble() < lo || v->GetDouble() > hi) {
      fail(fmt::format("{} must be between {} and {}, got {}", o.path(key), lo, hi, show(*v)));
      return false;
    }
    out = v->GetDouble();
    return true;
  }

  bool fraction(object_reader& o, std::string_view key, double& out) {
    return number(o, key, out, 0.0, 1.0);
  }

  bool boolean(object_reader& o, std::string_view key, bool& out) {
    const Value* v = o.get(key);
    if (!v)
      return true;
    if (!v->IsBool()) {
      fail(fmt::format("{} must be true or false, got {}", o.path(key), show(*v)));
      return false;
    }
    out = v->GetBool();
    return true;
  }

  bool string(object_reader& o, std::string_view key, std::string& out, bool non_empty = false) {
    const Value* v = o.get(key);
    if (!v)
      return true;
    if (!v->IsString() || (non_empty && v->GetStringLength() == 0)) {
      fail(fmt::format("{} must be a {}string, got {}", o.path(key), non_empty ? "non-empty " : "",
                       show(*v)));
      return false;
    }
    out = string_of(*v);
    return true;
  }

  /// The longest any duration may be: past it, a clock's time point plus the duration overflows.
  static constexpr milliseconds max_duration = std::chrono::hours(24 * 36500);
  /// PostgreSQL's timeouts (and libpq's connect_timeout) are 32-bit integers of milliseconds.
  static constexpr milliseconds max_postgres_timeout{std::numeric_limits<std::int32_t>::max()};

  bool duration(const Value& v, const std::string& path, milliseconds& out, bool positive,
                milliseconds max = max_duration) {
    if (!v.IsString()) {
      fail(fmt::format("{} must be a duration like \"2s\", got {}", path, show(v)));
      return false;
    }
    auto d = parse_duration(string_of(v));
    if (!d) {
      fail(fmt::format("{} must be a duration like \"2s\" (a whole number with unit ms, s, m, h "
                       "or d), got {}",
                       path, show(v)));
      return false;
    }
    if (positive && d->count() <= 0) {
      fail(fmt::format("{} must be > 0, got {}", path, show(v)));
      return false;
    }
    if (*d > max) {
      fail(fmt::format("{} must be at most {}ms{}, got {}", path, max.count(),
                       max == max_postgres_timeout ? " (PostgreSQL's limit, about 24.8 days)"
                                                   : " (100 years)",
                       show(v)));
      return false;
    }
    out = *d;
    return true;
  }

  bool duration(object_reader& o, std::string_view key, milliseconds& out, bool positive,
                milliseconds max = max_duration) {
    const Value* v = o.get(key);
    return !v || duration(*v, o.path(key), out, positive, max);
  }

  template <class E>
  void choice(object_reader& o, std::string_view key, E& out,
              std::initializer_list<std::pair<std::string_view, E>> options) {
    const Value* v = o.get(key);
    if (!v)
      return;
    if (v->IsString())
      for (const auto& [name, value] : options)
        if (name == string_of(*v)) {
          out = value;
          return;
        }
    std::vector<std::string> names;
    for (const auto& option : options)
      names.emplace_back(option.first);
    fail(fmt::format("{} must be one of {}, got {}", o.path(key), join(names, " "), show(*v)));
  }

  void method(object_reader& o, std::string& out) {
    const Value* v = o.get("method");
    if (!v)
      return;
    if (v->IsString() && std::find(std::begin(http_methods), std::end(http_methods),
                                   string_of(*v)) != std::end(http_methods)) {
      out = string_of(*v);
      return;
    }
    fail(fmt::format("{} must be one of GET POST PUT PATCH DELETE HEAD, got {}", o.path("method"),
                     show(*v)));
  }

  bool url(const Value& v, const std::string& path, std::string& out) {
    if (!v.IsString()) {
      fail(fmt::format("{} must be a URL string, got {}", path, show(v)));
      return false;
    }
    std::string_view text = string_of(v);
    // When simulator.baseUrl could not be worked out, that error has been reported already.
    if (!base_url_.resolved && text.find(base_url_reference) != std::string_view::npos)
      return false;
    if (auto problem = url_problem(text)) {
      fail(fmt::format("{} must be an http:// or https:// URL ({}), got {}", path, *problem,
                       show(v)));
      return false;
    }
    out = text;
    return true;
  }

  void read_server(object_reader& o, server_settings& s) {
    if (string(o, "host", s.host, true) && !is_host_name_or_address(s.host))
      fail(fmt::format("{} must be an IPv4 or IPv6 address or a host name, got \"{}\"",
                       o.path("host"), s.host));
    integer(o, "port", s.port, 1, 65535);
    integer(o, "threads", s.threads, 1, 1024);
    integer(o, "maxBodyBytes", s.max_body_bytes, 1024, std::int64_t{1} << 30);
    duration(o, "readTimeout", s.read_timeout, true);
    duration(o, "writeTimeout", s.write_timeout, true);
    duration(o, "keepAliveTimeout", s.keep_alive_timeout, true);
    duration(o, "requestTimeout", s.request_timeout, true);
    integer(o, "maxConnections", s.max_connections, 1, 1000000);
    integer(o, "maxConnectionsPerClient", s.max_connections_per_client, 1, 1000000);
    if (const Value* v = o.get("allowedOrigins"))
      read_origins(*v, o.path("allowedOrigins"), s.allowed_origins);
    if (const Value* v = o.get("allowedHosts"))
      read_hosts(*v, o.path("allowedHosts"), s.allowed_hosts);
    section(o, "tls", [&](object_reader& r) {
      bool usable = pem_file(r, "certFile", s.tls.cert_file);
      usable = pem_file(r, "keyFile", s.tls.key_file) && usable;
      pem_file(r, "clientCaFile", s.tls.client_ca_file);
      if (s.tls.cert_file.empty() != s.tls.key_file.empty())
        fail(fmt::format("{} and {} must be set together", r.path("certFile"), r.path("keyFile")));
      if (!s.tls.client_ca_file.empty() && s.tls.cert_file.empty())
        fail(fmt::format("{} needs {} and {}: client certificates are asked for over TLS only",
                         r.path("clientCaFile"), r.path("certFile"), r.path("keyFile")));
      if (usable && !s.tls.cert_file.empty() && !s.tls.key_file.empty())
        if (auto why = tls_pair_problem(s.tls.cert_file, s.tls.key_file))
          fail(fmt::format("{} and {} cannot serve TLS: {}", r.path("certFile"), r.path("keyFile"),
                           *why));
    });
  }

  bool pem_file(object_reader& o, std::string_view key, std::string& out) {
    if (!string(o, key, out))
      return false;
    auto why = out.empty() ? std::nullopt : pem_file_problem(out);
    if (why)
      fail(fmt::format("{} cannot be used: {}", o.path(key), *why));
    return !why;
  }

  // An origin as a browser sends it: scheme://host[:port], nothing after.
  void read_origins(const Value& v, const std::string& path, std::vector<std::string>& out) {
    if (!v.IsArray()) {
      fail(fmt::format("{} must be an array of origins like \"https://ops.example.com\", got {}",
                       path, show(v)));
      return;
    }
    for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
      auto at = index_path(path, i);
      std::string_view text = v[i].IsString() ? string_of(v[i]) : std::string_view();
      auto scheme = text.find("://");
      bool ok = (text.rfind("http://", 0) == 0 || text.rfind("https://", 0) == 0) &&
                scheme + 3 < text.size() &&
                text.find_first_of("/?#*@ ", scheme + 3) == std::string_view::npos;
      if (!ok)
        fail(fmt::format("{} must be an origin like \"https://ops.example.com\" or "
                         "\"http://localhost:3000\" (scheme, host, optional port; no path, no "
                         "wildcard), got {}",
                         at, show(v[i])));
      else
        out.emplace_back(lowercase(text));
    }
  }

  void read_hosts(const Value& v, const std::string& path, std::vector<std::string>& out) {
    if (!v.IsArray()) {
      fail(fmt::format("{} must be an array of host names like [\"outboxd\"], got {} (set "
                       "OUTBOXD_SERVER_ALLOWEDHOSTS to a JSON array)",
                       path, show(v)));
      return;
    }
    for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
      std::string_view text = v[i].IsString() ? string_of(v[i]) : std::string_view();
      // Container service names may hold underscores ("order_api"), which DNS names do not.
      std::string checked(text);
      std::replace(checked.begin(), checked.end(), '_', '-');
      // A bracketed IPv6 address passes is_host_name_or_address; addresses are always allowed.
      if (!is_host_name_or_address(checked) || text.find(':') != std::string_view::npos)
        fail(fmt::format("{} must be a host name like \"outboxd\" or \"outboxd.example.com\" (no "
                         "scheme, port, path or wildcard), got {}",
                         index_path(path, i), show(v[i])));
      else
        out.emplace_back(lowercase(text));
    }
  }

  // Token lists often come from the environment: no error below repeats what was given, in case
  // a token itself was pasted where its hash belongs.
  void read_auth(object_reader& o, auth_settings& s) {
    boolean(o, "allowAnonymous", s.allow_anonymous);
    choice(o, "anonymousRole", s.anonymous_role,
           {{"read", role::read}, {"write", role::write}, {"admin", role::admin}});
    choice(o, "metricsRole", s.metrics_role,
           {{"none", std::optional<role>()},
            {"read", role::read},
            {"write", role::write},
            {"admin", role::admin}});
    const Value* tokens = o.get("tokens");
    if (!tokens)
      return;
    if (!tokens->IsArray()) {
      fail(fmt::format("{} must be an array of {{\"name\", \"role\", \"sha256\"}} objects, got "
                       "{} (set OUTBOXD_AUTH_TOKENS to a JSON array)",
                       o.path("tokens"), tokens->IsString() ? "a string" : show(*tokens)));
      return;
    }
    for (rapidjson::SizeType i = 0; i < tokens->Size(); ++i) {
      auto path = index_path(o.path("tokens"), i);
      auto entry = object((*tokens)[i], path);
      if (!entry)
        continue;
      token_settings t;
      if (!entry->get("name"))
        fail(fmt::format("{}.name is missing (a name for logs, e.g. \"ops\")", path));
      string(*entry, "name", t.name, true);
      choice(*entry, "role", t.granted,
             {{"read", role::read}, {"write", role::write}, {"admin", role::admin}});
      if (!entry->get("role"))
        fail(fmt::format("{}.role is missing (read, write or admin)", path));
      const Value* hash = entry->get("sha256");
      if (!hash || !hash->IsString() || !parse_sha256(string_of(*hash), t.sha256))
        fail(fmt::format("{}.sha256 must be 64 hex digits, the SHA-256 of the token (printf %s "
                         "\"$TOKEN\" | sha256sum); got {}",
                         path,
                         !hash              ? std::string("nothing")
                         : hash->IsString() ? fmt::format("{} characters", hash->GetStringLength())
                                            : std::string("a non-string")));
      entry->report_unknown(errors_);
      for (const auto& earlier : s.tokens)
        if (earlier.sha256 == t.sha256)
          fail(fmt::format("{} has the same sha256 as the token named \"{}\"", path, earlier.name));
      s.tokens.push_back(std::move(t));
    }
  }

  void read_database(object_reader& o, database_settings& s) {
    string(o, "url", s.url);
    if (auto problem = connection_string_problem(s.url))
      fail(fmt::format("{} (or DATABASE_URL) is not a connection string libpq accepts: {}",
                       o.path("url"), *problem));
    integer(o, "poolSize", s.pool_size, 1, 1000);
    duration(o, "connectTimeout", s.connect_timeout, true, max_postgres_timeout);
    duration(o, "startupTimeout", s.startup_timeout, false);
    duration(o, "statementTimeout", s.statement_timeout, false, max_postgres_timeout);
    duration(o, "lockTimeout", s.lock_timeout, false, max_postgres_timeout);
    duration(o, "migrationLockTimeout", s.migration_lock_timeout, true, max_postgres_timeout);
  }

  void read_outbox(object_reader& o, outbox_settings& s) {
    boolean(o, "enabled", s.enabled);
    integer(o, "poolSize", s.pool_size, 1, 256);
    integer(o, "callsInFlight", s.calls_in_flight, 1, 4096);
    integer(o, "connections", s.connections, 1, 1000);
    integer(o, "batchSize", s.batch_size, 1, 10000);
    duration(o, "pollInterval", s.poll_interval, true);
    boolean(o, "useListenNotify", s.use_listen_notify);
    integer(o, "maxRetries", s.max_retries, 0, 1000);
    if (const Value* b = o.get("backoff"))
      read_backoff(*b, o.path("backoff"), s.backoff);
    duration(o, "retryFor", s.retry_for, true);
    duration(o, "leaseTimeout", s.lease_timeout, true);
    duration(o, "reaperInterval", s.reaper_interval, true);
    duration(o, "retention", s.retention, false);
    duration(o, "shutdownTimeout", s.shutdown_timeout, false);
  }

  void read_backoff(const Value& v, const std::string& path, backoff_settings& b) {
    auto o = object(v, path);
    if (!o)
      return;
    bool base_ok = duration(*o, "base", b.base, false);
    bool max_ok = duration(*o, "max", b.max, true);
    if (base_ok && max_ok && b.max < b.base)
      fail(fmt::format("{} must be >= {} ({}), got {}", o->path("max"), o->path("base"),
                       ms_text(b.base), ms_text(b.max)));
    o->report_unknown(errors_);
  }

  std::string known_destinations() const { return join(destination_names_, ", "); }

  bool is_destination(std::string_view name) const {
    return std::find(destination_names_.begin(), destination_names_.end(), name) !=
           destination_names_.end();
  }

  void read_http(object_reader& o, domain::routing_table& table) {
    const Value* routes = o.get("routes");
    if (routes && routes->IsObject()) {
      for (const auto& d : routes->GetObject())
        destination_names_.emplace_back(name_of(d.name));
      std::sort(destination_names_.begin(), destination_names_.end());
      for (const auto& d : routes->GetObject()) {
        std::string name(name_of(d.name));
        if (!destination_name(name, child_path(o.path("routes"), name)))
          continue;
        if (auto dest = read_destination(d.value, child_path(o.path("routes"), name), name))
          table.destinations.insert_or_assign(name, std::move(*dest));
      }
    } else if (routes) {
      fail(fmt::format("{} must be an object of destinations, got {}", o.path("routes"),
                       show(*routes)));
    }
    if (const Value* fanout = o.get("fanout"))
      read_fanout(*fanout, o.path("fanout"), table);
  }

  /// A destination's name goes into the Idempotency-Key and X-Destination headers of its calls
  /// and, with ".revert" after it, names its reverts in the audit.
  bool destination_name(const std::string& name, const std::string& path) {
    constexpr std::size_t longest = 100;
    const bool ok_chars = std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    });
    if (name.empty() || name.size() > longest || !ok_chars) {
      fail(fmt::format("{}: a destination name must be 1 to {} letters, digits, '.', '_' or '-' "
                       "(it is sent in the Idempotency-Key and X-Destination headers), got {}",
                       path, longest, show(Value(rapidjson::StringRef(name.data(), name.size())))));
      return false;
    }
    constexpr std::string_view reverts = ".revert";
    if (name.size() >= reverts.size() &&
        name.compare(name.size() - reverts.size(), reverts.size(), reverts) == 0) {
      fail(fmt::format("{}: a destination name must not end in '.revert': the audit names the "
                       "reverts of destination d 'd.revert'",
                       path));
      return false;
    }
    return true;
  }

  std::optional<domain::destination> read_destination(const Value& v, const std::string& path,
                                                      const std::string& name) {
    auto o = object(v, path);
    if (!o)
      return std::nullopt;
    domain::destination d;
    d.name = name;
    const Value* url_value = o->get("url");
    const Value* routes = o->get("routes");
    const Value* revert = o->get("revert");
    method(*o, d.method);
    duration(*o, "timeout", d.timeout, true);
    duration(*o, "connectTimeout", d.connect_timeout, true);
    integer(*o, "maxResponseBytes", d.max_response_bytes, 1,
            std::numeric_limits<std::int64_t>::max());
    if (const Value* tls = o->get("tls"))
      read_tls(*tls, o->path("tls"), d.tls);
    if (const Value* breaker = o->get("circuitBreaker"))
      read_breaker(*breaker, o->path("circuitBreaker"), d.breaker);
    integer(*o, "maxConcurrency", d.max_concurrency, 0, 100000);
    number(*o, "ratePerSecond", d.rate_per_second, 0, 1000000);
    if (o->get("maxRetries")) {
      int n = 0;
      if (integer(*o, "maxRetries", n, 0, 1000))
        d.max_retries = n;
    }
    if (o->get("retryFor")) {
      milliseconds t{0};
      if (duration(*o, "retryFor", t, true))
        d.retry_for = t;
    }
    boolean(*o, "required", d.required);
    if (const Value* headers = o->get("headers")) {
      if (auto h = object(*headers, o->path("headers")))
        for (const auto& m : headers->GetObject()) {
          if (m.value.IsString())
            d.headers.emplace_back(name_of(m.name), string_of(m.value));
          else
            fail(fmt::format("{} must be a string, got {}", h->path(name_of(m.name)),
                             show(m.value)));
        }
    }
    if (url_value && routes) {
      fail(fmt::format("{} must have either url or routes, not both", path));
    } else if (!url_value && !routes) {
      fail(fmt::format("{} must have a url or a routes list", path));
    } else if (url_value) {
      domain::route r;
      url(*url_value, o->path("url"), r.url);
      if (revert)
        r.revert = read_revert(*revert, o->path("revert"));
      d.routes.push_back(std::move(r));
    } else {
      if (revert)
        fail(fmt::format("{} is allowed only next to url; with routes, each route has its own "
                         "revert",
                         o->path("revert")));
      if (!routes->IsArray() || routes->Empty()) {
        fail(fmt::format("{} must be a non-empty array of routes, got {}", o->path("routes"),
                         show(*routes)));
      } else {
        for (rapidjson::SizeType i = 0; i < routes->Size(); ++i)
          if (auto r = read_route((*routes)[i], index_path(o->path("routes"), i), name))
            d.routes.push_back(std::move(*r));
        check_reverts_tell_routes_apart(d, o->path("routes"));
      }
    }
    o->report_unknown(errors_);
    return d;
  }

  /// A compensation finds the route a call took by the URL in its audit row: routes that can call
  /// the same URL must undo it alike, or a call would be reverted with another route's template.
  void check_reverts_tell_routes_apart(const domain::destination& d, const std::string& routes) {
    for (std::size_t i = 0; i < d.routes.size(); ++i)
      for (std::size_t j = i + 1; j < d.routes.size(); ++j)
        if (!d.routes[i].url.empty() && // empty: its url was refused already
            domain::urls_overlap(d.routes[i].url, d.routes[j].url) &&
            !domain::same_revert(d.routes[i], d.routes[j]))
          fail(fmt::format("{} and {} can call the same URL but revert differently: a "
                           "compensation, which finds the route by the URL it called, could not "
                           "tell them apart; give them different URLs, or the same revert",
                           index_path(routes, i), index_path(routes, j)));
  }

  void read_breaker(const Value& v, const std::string& path, domain::breaker_settings& b) {
    auto o = object(v, path);
    if (!o)
      return;
    boolean(*o, "enabled", b.enabled);
    integer(*o, "failureThreshold", b.failure_threshold, 1, 1000000);
    bool open_ok = duration(*o, "openFor", b.open_for, true);
    bool max_ok = duration(*o, "maxOpenFor", b.max_open_for, true);
    if (open_ok && max_ok && b.max_open_for < b.open_for)
      fail(fmt::format("{} must be >= {} ({}), got {}", o->path("maxOpenFor"), o->path("openFor"),
                       ms_text(b.open_for), ms_text(b.max_open_for)));
    o->report_unknown(errors_);
  }

  void read_tls(const Value& v, const std::string& path, domain::tls_options& tls) {
    auto o = object(v, path);
    if (!o)
      return;
    // The files are checked now: a typo would otherwise surface as a failed call, per event.
    auto file = [&](std::string_view key, std::string& out) {
      if (!string(*o, key, out, true) || out.empty())
        return;
      if (auto problem = pem_file_problem(out))
        fail(fmt::format("{}: cannot use {}: {}", o->path(key), out, *problem));
    };
    file("caFile", tls.ca_file);
    file("certFile", tls.cert_file);
    file("keyFile", tls.key_file);
    if (!tls.cert_file.empty() && tls.key_file.empty())
      fail(fmt::format("{} is required with {}", o->path("keyFile"), o->path("certFile")));
    if (tls.cert_file.empty() && !tls.key_file.empty())
      fail(fmt::format("{} is required with {}", o->path("certFile"), o->path("keyFile")));
    string(*o, "serverName", tls.server_name, true);
    boolean(*o, "insecureSkipVerify", tls.insecure_skip_verify);
    o->report_unknown(errors_);
  }

  std::optional<domain::route> read_route(const Value& v, const std::string& path,
                                          const std::string& destination) {
    auto o = object(v, path);
    if (!o)
      return std::nullopt;
    domain::route r;
    if (const Value* u = o->get("url"))
      url(*u, o->path("url"), r.url);
    else
      fail(fmt::format("{} is required", o->path("url")));
    if (const Value* c = o->get("condition"))
      r.when = read_condition(*c, o->path("condition"), destination);
    if (const Value* revert = o->get("revert"))
      r.revert = read_revert(*revert, o->path("revert"));
    o->report_unknown(errors_);
    return r;
  }

  std::optional<domain::condition> read_condition(const Value& v, const std::string& path,
                                                  const std::string& destination) {
    auto o = object(v, path);
    if (!o)
      return std::nullopt;
    domain::condition c;
    if (const Value* p = o->get("jsonPath"); !p) {
      fail(fmt::format("{} is required", o->path("jsonPath")));
    } else if (!p->IsString()) {
      fail(
          fmt::format("{} must be a string like \"$.a.b\", got {}", o->path("jsonPath"), show(*p)));
    } else if (auto parsed = domain::json_path::parse(string_of(*p)); !parsed) {
      fail(fmt::format("{}: {}", o->path("jsonPath"), parsed.err().message));
    } else {
      c.path = std::move(parsed.value());
    }
    std::optional<domain::condition_operator> op;
    std::string op_name;
    if (const Value* p = o->get("operator"); !p) {
      fail(fmt::format("{} is required (one of eq ne gt gte lt lte contains exists)",
                       o->path("operator")));
    } else if (!p->IsString()) {
      fail(fmt::format("{} must be a string, got {}", o->path("operator"), show(*p)));
    } else {
      op_name = string_of(*p);
      op = domain::parse_condition_operator(op_name);
      if (op)
        c.op = *op;
      else
        fail(fmt::format("{}: unknown operator '{}' (expected eq ne gt gte lt lte contains exists)",
                         o->path("operator"), op_name));
    }
    const Value* value = o->get("value");
    if (!value && op && *op != domain::condition_operator::exists)
      fail(fmt::format("{} is required for operator '{}'", o->path("value"), op_name));
    if (value)
      read_condition_value(*value, o->path("value"), op, op_name, c.value);
    if (const Value* p = o->get("previousDestination")) {
      if (!p->IsString())
        fail(fmt::format("{} must be a string, got {}", o->path("previousDestination"), show(*p)));
      else if (!is_destination(string_of(*p)))
        fail(fmt::format("{}: unknown route '{}' (known: {})", o->path("previousDestination"),
                         string_of(*p), known_destinations()));
      else {
        c.previous_destination = std::string(string_of(*p));
        previous_references_[destination].push_back(
            {o->path("previousDestination"), *c.previous_destination});
      }
    }
    o->report_unknown(errors_);
    return c;
  }

  void read_condition_value(const Value& v, const std::string& path,
                            std::optional<domain::condition_operator> op,
                            const std::string& op_name, domain::condition_value& out) {
    using domain::condition_operator;
    bool ordering = op && (*op == condition_operator::gt || *op == condition_operator::gte ||
                           *op == condition_operator::lt || *op == condition_operator::lte);
    if (ordering) {
      // Stored as a number either way: the comparison is numeric, "50" and 50 mean the same.
      if (v.IsNumber())
        out = v.GetDouble();
      else if (auto d = v.IsString() ? parse_double(string_of(v)) : std::nullopt)
        out = *d;
      else
        fail(fmt::format("{} must be a number (or a numeric string) for operator '{}', got {}",
                         path, op_name, show(v)));
      return;
    }
    if (v.IsBool())
      out = v.GetBool();
    else if (v.IsNumber())
      out = v.GetDouble();
    else if (v.IsString())
      out = std::string(string_of(v));
    else
      fail(fmt::format("{} must be a string, number or boolean, got {}", path, show(v)));
    if (op && *op == condition_operator::exists)
      out = std::monostate{};
  }

  std::optional<domain::revert_template> read_revert(const Value& v, const std::string& path) {
    auto o = object(v, path);
    if (!o)
      return std::nullopt;
    domain::revert_template t;
    const Value* url_value = o->get("url");
    if (url_value)
      url(*url_value, o->path("url"), t.url);
    else
      fail(fmt::format("{} is required", o->path("url")));
    method(*o, t.method);
    std::set<std::string, std::less<>> extract_names;
    if (const Value* extract = o->get("extract"))
      if (auto e = object(*extract, o->path("extract")))
        for (const auto& m : extract->GetObject()) {
          extract_names.emplace(name_of(m.name));
          if (auto x = read_extraction(m.value, e->path(name_of(m.name))))
            t.extract.insert_or_assign(std::string(name_of(m.name)), std::move(*x));
        }
    const Value* payload = o->get("payload");
    if (payload && !payload->IsObject())
      fail(fmt::format("{} must be a JSON object, got {}", o->path("payload"), show(*payload)));
    else if (payload)
      t.payload_json = compact_json(*payload);

    // Placeholders without an extract entry would only be discovered when a compensation runs,
    // typically long after start-up and at the worst moment.
    auto check = [&](std::string_view text, const std::string& where) {
      std::set<std::string> reported;
      for (const auto& name : domain::template_placeholders(text))
        if (!extract_names.count(name) && reported.insert(name).second)
          fail(fmt::format("{} uses {{{}}} but revert.extract has no '{}'", where, name, name));
    };
    if (url_value && url_value->IsString())
      check(string_of(*url_value), o->path("url"));
    if (payload && payload->IsObject())
      for_each_string(*payload, o->path("payload"), check);
    o->report_unknown(errors_);
    return t;
  }

  template <class F>
  static void for_each_string(const Value& v, const std::string& path, const F& visit) {
    if (v.IsString())
      visit(string_of(v), path);
    else if (v.IsObject())
      for (const auto& m : v.GetObject())
        for_each_string(m.value, child_path(path, name_of(m.name)), visit);
    else if (v.IsArray())
      for (rapidjson::SizeType i = 0; i < v.Size(); ++i)
        for_each_string(v[i], index_path(path, i), visit);
  }

  std::optional<domain::extraction> read_extraction(const Value& v, const std::string& path) {
    if (!v.IsString()) {
      fail(fmt::format("{} must be a string like \"response:$.id\", got {}", path, show(v)));
      return std::nullopt;
    }
    std::string_view text = string_of(v);
    domain::extraction x;
    if (text.rfind("request:", 0) == 0) {
      x.from = domain::extraction::source::request;
      text.remove_prefix(8);
    } else if (text.rfind("response:", 0) == 0) {
      text.remove_prefix(9);
    } else if (text.rfind("$", 0) != 0) {
      fail(fmt::format("{} must be \"request:$...\", \"response:$...\" or \"$...\", got {}", path,
                       show(v)));
      return std::nullopt;
    }
    auto parsed = domain::json_path::parse(text);
    if (!parsed) {
      fail(fmt::format("{}: {}", path, parsed.err().message));
      return std::nullopt;
    }
    x.path = std::move(parsed.value());
    return x;
  }

  void read_fanout(const Value& v, const std::string& path, domain::routing_table& table) {
    auto o = object(v, path);
    if (!o)
      return;
    for (const auto& m : v.GetObject()) {
      std::string event(name_of(m.name));
      auto list_path = o->path(event);
      if (event.empty() || event.front() == '!') {
        fail(fmt::format("{}: an event type is a name that does not start with '!' (a "
                         "cancellation reverts what its event's fan-out applied; it has no "
                         "fan-out of its own)",
                         list_path));
        continue;
      }
      if (!m.value.IsArray()) {
        fail(fmt::format("{} must be an array of route names ([] delivers nothing), got {}",
                         list_path, show(m.value)));
        continue;
      }
      std::vector<std::string> names;
      for (rapidjson::SizeType i = 0; i < m.value.Size(); ++i) {
        const Value& entry = m.value[i];
        auto entry_path = index_path(list_path, i);
        if (!entry.IsString()) {
          fail(fmt::format("{} must be a route name, got {}", entry_path, show(entry)));
          continue;
        }
        std::string name(string_of(entry));
        if (!is_destination(name)) {
          fail(fmt::format("{}: unknown route '{}' (known: {})", entry_path, name,
                           known_destinations()));
          continue;
        }
        if (std::find(names.begin(), names.end(), name) != names.end()) {
          fail(fmt::format("{}: route '{}' is listed twice", entry_path, name));
          continue;
        }
        check_previous_destinations(list_path, i, name, names);
        names.push_back(name);
      }
      table.fanout.insert_or_assign(event, std::move(names));
    }
  }

  // A condition on an earlier destination's response can only be evaluated if that destination
  // is called before this one for the same event.
  void check_previous_destinations(const std::string& list_path, std::size_t index,
                                   const std::string& name,
                                   const std::vector<std::string>& earlier) {
    auto it = previous_references_.find(name);
    if (it == previous_references_.end())
      return;
    std::set<std::string> reported;
    for (const auto& [where, previous] : it->second)
      if (std::find(earlier.begin(), earlier.end(), previous) == earlier.end() &&
          reported.insert(previous).second)
        fail(fmt::format("{}: '{}' must come after '{}' in this list, because {} reads its "
                         "response",
                         index_path(list_path, index), name, previous, where));
  }

  void read_simulator(object_reader& o, simulator_settings& s) {
    boolean(o, "enabled", s.enabled);
    if (const Value* b = o.get("baseUrl")) {
      if (!b->IsString())
        fail(fmt::format("{} must be a URL string, got {}", o.path("baseUrl"), show(*b)));
      else if (base_url_.given)
        url(*b, o.path("baseUrl"), s.base_url);
      else
        s.base_url = string_of(*b);
    }
    if (const Value* seed = o.get("seed")) {
      // Written as a number with a fraction or an exponent, a seed is taken only where doubles
      // hold every integer (2^53): 1e30 would be some other seed than the one asked for.
      auto i = integer_of(*seed);
      if (seed->IsUint64())
        s.seed = seed->GetUint64();
      else if (i && *i >= 0 && *i < (std::int64_t{1} << 53))
        s.seed = static_cast<std::uint64_t>(*i);
      else
        fail(fmt::format("{} must be an integer between 0 and 18446744073709551615, got {}",
                         o.path("seed"), show(*seed)));
    }
    if (const Value* services = o.get("services"))
      if (auto sv = object(*services, o.path("services")))
        for (const auto& m : services->GetObject()) {
          auto name = name_of(m.name);
          if (!simulator::is_knob_name(name)) {
            fail(fmt::format("unknown key {} (known services: {})", sv->path(name),
                             simulator::known_knob_names()));
            continue;
          }
          simulator_knobs knobs;
          for (auto& problem : simulator::apply_knob_patch(m.value, knobs, sv->path(name)))
            fail(std::move(problem));
          s.services.insert_or_assign(std::string(name), knobs);
        }
    for (auto name : simulator::knob_names)
      s.services.try_emplace(std::string(name));
  }

  std::vector<std::string>& errors_;
  base_url_state base_url_;
  std::vector<std::string> destination_names_; // sorted, for lookups and messages
  // destination -> (key path of a condition's previousDestination, the destination it names)
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> previous_references_;
};

// Replaces the value of each `password` in a libpq key=value string (quoted values included).
// `%XX` escapes decoded (a malformed one kept as it is).
std::string percent_decoded(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned value = 0;
    if (text[i] == '%' && i + 2 < text.size() &&
        std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16).ptr ==
            text.data() + i + 3) {
      out += static_cast<char>(value);
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string mask_key_value_password(std::string_view text) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    bool word_start = i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1]));
    std::size_t keyword = !word_start                           ? 0
                          : text.substr(i, 11) == "sslpassword" ? 11
                          : text.substr(i, 8) == "password"     ? 8
                                                                : 0;
    if (keyword == 0) {
      out.push_back(text[i++]);
      continue;
    }
    std::size_t j = i + keyword;
    while (j < text.size() && text[j] == ' ')
      ++j;
    if (j >= text.size() || text[j] != '=') {
      out.push_back(text[i++]);
      continue;
    }
    ++j;
    while (j < text.size() && text[j] == ' ')
      ++j;
    out.append(text.substr(i, j - i));
    if (j < text.size() && text[j] == '\'') {
      for (++j; j < text.size() && text[j] != '\''; ++j)
        if (text[j] == '\\')
          ++j;
      ++j;
    } else {
      while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j])))
        ++j;
    }
    out.append("***");
    i = std::min(j, text.size());
  }
  return out;
}

} // namespace

std::string_view default_config_text() {
  for (const auto& [name, text] : embedded::files())
    if (name == defaults_name)
      return text;
  return {};
}

std::optional<milliseconds> parse_duration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
    ++digits;
  if (digits == 0)
    return std::nullopt;
  std::int64_t amount = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + digits, amount);
  if (ec != std::errc())
    return std::nullopt;
  auto unit = text.substr(digits);
  std::int64_t factor = 0;
  if (unit == "ms")
    factor = 1;
  else if (unit == "s")
    factor = 1000;
  else if (unit == "m")
    factor = 60 * 1000;
  else if (unit == "h")
    factor = 60 * 60 * 1000;
  else if (unit == "d")
    factor = 24 * 60 * 60 * 1000;
  else if (unit.empty() && amount == 0)
    return milliseconds{0}; // a bare "0" is unambiguous; "5" is not
  else
    return std::nullopt;
  if (amount > std::numeric_limits<milliseconds::rep>::max() / factor)
    return std::nullopt;
  return milliseconds{amount * factor};
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> out;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view text(*entry);
    auto eq = text.find('=');
    if (eq != std::string_view::npos && eq > 0)
      out.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return out;
}

std::string mask_database_url(std::string_view url) {
  std::string_view scheme;
  for (std::string_view s : {"postgresql://", "postgres://"})
    if (url.rfind(s, 0) == 0)
      scheme = s;
  if (scheme.empty())
    return mask_key_value_password(url);
  std::string out(url);
  auto authority_end = out.find_first_of("/?", scheme.size());
  auto at =
      out.rfind('@', authority_end == std::string::npos ? std::string::npos : authority_end - 1);
  if (at != std::string::npos && at >= scheme.size()) {
    auto colon = out.find(':', scheme.size());
    if (colon != std::string::npos && colon < at && colon + 1 < at)
      out.replace(colon + 1, at - colon - 1, "***");
  }
  // libpq also takes the password (and the client key's, sslpassword) as a query parameter,
  // whose name it percent-decodes like the value.
  auto query = out.find('?');
  if (query == std::string::npos)
    return out;
  std::string masked = out.substr(0, query + 1);
  for (std::size_t start = query + 1; start <= out.size();) {
    auto end = std::min(out.find('&', start), out.size());
    auto param = std::string_view(out).substr(start, end - start);
    auto equals = param.find('=');
    auto name = percent_decoded(param.substr(0, equals));
    if (equals != std::string_view::npos && (name == "password" || name == "sslpassword"))
      masked.append(param.substr(0, equals + 1)).append("***");
    else
      masked.append(param);
    if (end < out.size())
      masked += '&';
    start = end + 1;
  }
  return masked;
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]")
    return true;
  // An address of 127.0.0.0/8 itself: a host name that merely starts so ("127.example.com") may
  // resolve anywhere.
  in_addr v4{};
  const std::string text(host);
  return inet_pton(AF_INET, text.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

std::vector<std::string> start_up_warnings(const settings& s) {
  std::vector<std::string> out;
  if (!is_loopback_host(s.server.host) && s.auth.tokens.empty() && s.admin.token.empty())
    out.push_back(fmt::format("server.host {} can be reached from other machines and "
                              "auth.allowAnonymous is true: every route, admin ones included, "
                              "is served to anyone without a token",
                              s.server.host));
  if (s.simulator.enabled && !is_loopback_host(s.server.host))
    out.push_back("simulator.enabled is true on a reachable address: the orders go to the "
                  "simulated services (/api/inventory, /api/billing, ...), which answer this "
                  "machine only; set it to false where real partners are called");
  // A worker runs its statements one at a time between its calls: one that runs long holds up
  // the calls in flight, whose leases keep running.
  const auto statements = s.database.statement_timeout;
  if (statements.count() == 0 || statements > s.outbox.lease_timeout / 2)
    out.push_back(fmt::format(
        "database.statementTimeout ({}) is {} half of outbox.leaseTimeout ({}): a worker inside "
        "one statement that long holds up its other events, their leases can expire, and "
        "another worker then calls their partners again",
        statements.count() == 0 ? "0: no bound" : ms_text(statements),
        statements.count() == 0 ? "not within" : "more than", ms_text(s.outbox.lease_timeout)));
  // A fan-out of an event type the order API never makes is for events the user's application
  // inserts itself, or a typo that leaves the built-in one in force.
  const std::vector<std::string_view> made = {domain::order_created, domain::order_status_updated};
  for (const auto& [event, names] : s.http.fanout)
    if (std::find(made.begin(), made.end(), event) == made.end())
      out.push_back(fmt::format("http.fanout.{}: the order API makes no {} events (it makes {}); "
                                "only events your application inserts itself use this fan-out{}",
                                event, event, fmt::join(made, " and "), suggestion(event, made)));
  // A stop gives the deliveries in flight 3/4 of outbox.shutdownTimeout and the reverts 1/2.
  for (const auto& [name, d] : s.http.destinations) {
    const bool reverts = std::any_of(d.routes.begin(), d.routes.end(),
                                     [](const auto& r) { return r.revert.has_value(); });
    const auto stop_wait =
        reverts ? s.outbox.shutdown_timeout / 2 : s.outbox.shutdown_timeout * 3 / 4;
    if (d.tls.insecure_skip_verify)
      out.push_back(fmt::format("http.routes.{}.tls.insecureSkipVerify is true: calls to {} accept "
                                "any certificate (no TLS verification)",
                                name, name));
    if (d.timeout > stop_wait)
      out.push_back(fmt::format(
          "http.routes.{}.timeout ({}) is longer than a stop waits for a call in flight (half of "
          "outbox.shutdownTimeout for a revert, three quarters for a delivery: {} for {} "
          "here): such a call "
          "is abandoned without its answer and retried after the restart; set "
          "outbox.shutdownTimeout to at least {} the timeout",
          name, ms_text(d.timeout), ms_text(stop_wait),
          reverts ? "a revert" : "a delivery, it has no revert", reverts ? "twice" : "4/3 of"));
  }
  return out;
}

load_result load(const load_options& options) {
  load_result result;
  Document doc;
  if (!parse_json(default_config_text(), defaults_source, doc, result.errors))
    return result;
  if (options.config_path) {
    std::string why;
    auto text = read_file(*options.config_path, why);
    if (!text) {
      result.errors.push_back(
          fmt::format("cannot read configuration file {}: {}", *options.config_path, why));
      return result;
    }
    Document file;
    if (!parse_json(*text, *options.config_path, file, result.errors))
      return result;
    if (!file.IsObject()) {
      result.errors.push_back(fmt::format("{}: the configuration must be a JSON object, got {}",
                                          *options.config_path, show(file)));
      return result;
    }
    drop_redefined_destinations(doc, file);
    merge(doc, file, doc.GetAllocator());
  }
  apply_environment(doc, options.environment, result.errors);
  for (const auto& option : options.set_overrides)
    apply_set(doc, option, result.errors);
  auto base_url = resolve_base_url(doc);
  result.effective_json = effective_json(doc);

  settings_reader reader(result.errors, base_url);
  auto s = reader.read(doc);
  if (result.errors.empty())
    result.value = std::move(s);
  return result;
}

} // namespace outboxd::conf
