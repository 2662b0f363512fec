// Serves the embedded web UI. The strict CSP is the second line of defence behind the UI's
// text-only rendering: even a missed innerHTML could not run inline or foreign script.
#include "http/ui_routes.hpp"

#include <httplib.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outboxd::http {
namespace embedded {
std::vector<std::pair<std::string_view, std::string_view>> ui_files();
}

namespace {

constexpr const char* content_security_policy =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; "
    "object-src 'none'";

std::string_view ui_file(std::string_view name) {
  for (const auto& [file, content] : embedded::ui_files())
    if (file == name)
      return content;
  throw std::logic_error("web UI file " + std::string(name) + " is not embedded");
}

void serve(listener& routes, const std::string& path, std::string_view file,
           const char* content_type) {
  // Looked up once at registration: a missing file fails start-up, not the first request.
  auto content = ui_file(file);
  routes.route("GET", path, route_kind::static_file, access::open,
               [content, content_type](const httplib::Request&, httplib::Response& res) {
                 res.set_header("Cache-Control", "no-cache");
                 res.set_header("Content-Security-Policy", content_security_policy);
                 res.set_header("Referrer-Policy", "no-referrer");
                 res.set_content(content.data(), content.size(), content_type);
               });
}

} // namespace

void install_ui_routes(listener& routes) {
  serve(routes, "/", "index.html", "text/html; charset=utf-8");
  serve(routes, "/ui/app.js", "app.js", "text/javascript; charset=utf-8");
  serve(routes, "/ui/style.css", "style.css", "text/css; charset=utf-8");
  serve(routes, "/ui/favicon.svg", "favicon.svg", "image/svg+xml");
}

} // namespace outboxd::http
