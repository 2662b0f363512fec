// The web UI: static files compiled into the binary and served at / and /ui/.
#pragma once

#include "http/listener.hpp"

namespace outboxd::http {

/// Registers `GET /` (index.html), `GET /ui/app.js`, `GET /ui/style.css` and
/// `GET /ui/favicon.svg`, each with its Content-Type, `Cache-Control: no-cache`,
/// `X-Content-Type-Options: nosniff` and a `Content-Security-Policy` that allows only
/// same-origin scripts, styles, images and requests. They are registered as
/// `route_kind::static_file`.
void install_ui_routes(listener& routes);

} // namespace outboxd::http
