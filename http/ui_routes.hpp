// The web UI: static files compiled into the binary and served at / and /ui/.
#pragma once

namespace httplib {
class Server;
}

namespace outboxd::http {

/// Registers `GET /` (index.html), `GET /ui/app.js`, `GET /ui/style.css` and
/// `GET /ui/favicon.svg`, each with its Content-Type, `Cache-Control: no-cache`,
/// `X-Content-Type-Options: nosniff` and a `Content-Security-Policy` that allows only
/// same-origin scripts, styles, images and requests.
void install_ui_routes(httplib::Server& server);

} // namespace outboxd::http
