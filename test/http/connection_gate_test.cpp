// Slow, dribbling and idle clients against the plain-HTTP listener with one or two worker
// threads: they cost no thread, a request must arrive whole within server.requestTimeout, the
// connection caps shed the longest-idle connection or answer 503 at once, and what well-behaved
// clients send (pipelining, Expect: 100-continue, bodies) still works, a deferred answer
// holds no thread while it waits, and a simulated partner's requests run on the gate thread.
#include "http/connection_gate.hpp"
#include "http/listener.hpp"
#include "metrics/metrics.hpp"
#include "test/support/raw_http.hpp"

#include <atomic>
#include <chrono>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>
#include <memory>
#include <thread>
#include <vector>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

// Far longer than any answer of an idle server takes: a request that waits for it waited for a
// thread held by another client.
constexpr auto answered = 3000ms;

struct gate_fixture {
  explicit gate_fixture(int threads = 1, int max_connections = 100, int per_client = 100,
                        std::chrono::milliseconds request_timeout = 1500ms,
                        std::chrono::milliseconds write_timeout = 1500ms) {
    conf::server_settings s;
    s.port = 0;
    s.threads = threads;
    s.max_body_bytes = 1000;
    s.request_timeout = request_timeout;
    s.keep_alive_timeout = 1500ms;
    s.write_timeout = write_timeout;
    s.max_connections = max_connections;
    s.max_connections_per_client = per_client;
    server = std::make_unique<http::listener>(s, "test");
    server->route("GET", "/healthz", http::route_kind::api, http::access::open,
                  [](const httplib::Request&, httplib::Response& res) {
                    res.set_content(R"({"status":"ok"})", "application/json");
                  });
    server->run_on_gate("GET", "/healthz");
    server->route("POST", "/echo", http::route_kind::api, http::access::open,
                  [](const httplib::Request& req, httplib::Response& res) {
                    res.set_content(req.body, "application/json");
                  });
    server->route("GET", "/sleep/{ms}", http::route_kind::api, http::access::open,
                  [](const httplib::Request& req, httplib::Response& res) {
                    std::this_thread::sleep_for(
                        std::chrono::milliseconds(std::stoi(req.matches[1].str())));
                    res.set_content("slept", "text/plain");
                  });
    // Answers after two deferred waits of `ms` each (the step counter is the resumed state),
    // with the steps it went through; what the deferring runs answer must never be sent.
    auto wait = [](const httplib::Request& req, httplib::Response& res) {
      auto step = std::static_pointer_cast<int>(http::resumed_state());
      int done = step ? *step : 0;
      auto wait = std::chrono::milliseconds(std::stoi(req.matches[1].str()));
      res.set_content("dropped", "text/plain");
      if (done < 2 && http::defer_answer(wait, std::make_shared<int>(done + 1)))
        return;
      res.set_content(fmt::format("steps {}{}", done, http::deferred_since() ? ", resumed" : ""),
                      "text/plain");
    };
    server->route("GET", "/wait/{ms}", http::route_kind::api, http::access::open, wait);
    // A simulated partner's routes run on the gate thread itself.
    constexpr auto partner = http::route_kind::simulated_service;
    server->route("GET", "/quick/wait/{ms}", partner, http::access::open, wait);
    server->route("GET", "/quick/big/{bytes}", partner, http::access::open,
                  [](const httplib::Request& req, httplib::Response& res) {
                    res.set_content(std::string(std::stoul(req.matches[1].str()), 'x'),
                                    "text/plain");
                  });
    server->route("GET", "/big/{bytes}", http::route_kind::api, http::access::open,
                  [](const httplib::Request& req, httplib::Response& res) {
                    res.set_content(std::string(std::stoul(req.matches[1].str()), 'y'),
                                    "text/plain");
                  });
    // Hold their worker until the test lets them go; the second shadows the partner route after
    // it (the first route that matches serves a request).
    auto hold = [this](const httplib::Request&, httplib::Response& res) {
      while (!released)
        std::this_thread::sleep_for(5ms);
      res.set_content("held", "text/plain");
    };
    server->route("GET", "/hold", http::route_kind::api, http::access::open, hold);
    server->route("GET", "/quick/held", http::route_kind::api, http::access::open, hold);
    server->route("GET", "/quick/{name}", partner, http::access::open,
                  [](const httplib::Request& req, httplib::Response& res) {
                    res.set_content(req.matches[1].str(), "text/plain");
                  });
    port = server->bind(0);
    server->start();
  }
  ~gate_fixture() { server->stop(); }

  std::string get(const std::string& path = "/healthz") const {
    return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  }
  std::string post(const std::string& body) const {
    return "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  std::unique_ptr<http::listener> server;
  int port = 0;
  std::atomic<bool> released = false; // lets /hold answer
};

/// Connections that send their request a few bytes at a time and never finish it.
struct dribblers {
  dribblers(int port, int count) {
    for (int i = 0; i < count; ++i) {
      conns.push_back(std::make_unique<raw_connection>(port));
      conns.back()->send("POST /echo HTTP/1.1\r\n");
    }
  }
  void dribble() {
    for (auto& c : conns)
      try {
        c->send("X-A: b\r\n");
      } catch (const std::exception&) { // cut off by the server: fine
      }
  }
  std::vector<std::unique_ptr<raw_connection>> conns;
};

} // namespace

TEST_CASE("dribbling and idle connections hold no thread: one thread still answers everyone") {
  gate_fixture f(1);
  dribblers slow(f.port, 30);
  std::vector<std::unique_ptr<raw_connection>> idle;
  for (int i = 0; i < 30; ++i)
    idle.push_back(std::make_unique<raw_connection>(f.port));
  // A keep-alive client that made one request and stays connected, idle.
  raw_connection kept(f.port);
  kept.send(f.get());
  REQUIRE(kept.read_response(answered).status == 200);
  for (int round = 0; round < 5; ++round) {
    slow.dribble();
    raw_connection probe(f.port);
    probe.send(f.get());
    auto r = probe.read_response(answered);
    CHECK(r.status == 200);
    std::this_thread::sleep_for(100ms);
  }
  kept.send(f.get()); // the idle keep-alive connection is served again
  CHECK(kept.read_response(answered).status == 200);
}

TEST_CASE("a request must arrive whole within server.requestTimeout, however it trickles") {
  gate_fixture f;
  raw_connection c(f.port);
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n");
  // A byte every 200 ms: no single read waits long, the whole takes too long.
  raw_response r;
  for (int i = 0; i < 30 && r.status == 0; ++i) {
    try {
      c.send("a");
    } catch (const std::exception&) {
    }
    r = c.read_response(200ms);
  }
  CHECK(r.status == 408);
  CHECK(r.body.find("server.requestTimeout") != std::string::npos);
  CHECK(r.head.find("Connection: close") != std::string::npos);
  CHECK(r.head.find("X-Request-Id: ") != std::string::npos);
  CHECK(c.closed_within(answered));
}

TEST_CASE("an idle connection is closed after server.keepAliveTimeout") {
  gate_fixture f;
  raw_connection c(f.port);
  CHECK(c.closed_within(4000ms));
}

TEST_CASE("a served keep-alive connection is idle again: closed after keepAliveTimeout, shed "
          "at the cap") {
  gate_fixture f(1, 3, 3);
  auto older = std::make_unique<raw_connection>(f.port);
  std::this_thread::sleep_for(20ms);
  raw_connection served(f.port);
  served.send(f.get());
  REQUIRE(served.read_response(answered).status == 200);
  std::this_thread::sleep_for(50ms); // past the worker's wait for a next request
  served.send(f.get());
  REQUIRE(served.read_response(answered).status == 200);
  std::this_thread::sleep_for(20ms);
  raw_connection younger(f.port);
  // The cap is reached: each newcomer sheds the longest-idle connection, the served one second.
  raw_connection first(f.port);
  CHECK(older->closed_within(answered));
  older.reset();
  raw_connection second(f.port);
  CHECK(served.closed_within(answered));
  CHECK_FALSE(younger.closed_within(100ms));

  raw_connection kept(f.port); // sheds `younger`; `kept` is then served and left idle
  kept.send(f.get());
  REQUIRE(kept.read_response(answered).status == 200);
  CHECK(kept.closed_within(4000ms));
}

TEST_CASE("keep-alive clients churning at the connection cap: every request answered or its "
          "connection closed") {
  // Twelve clients, eight connections allowed: newcomers keep shedding idle connections while
  // the workers hand served ones back. A connection is never left open without an answer.
  gate_fixture f(2, 8, 8);
  std::atomic<int> answered_200{0}, stuck{0}, other{0};
  std::vector<std::thread> clients;
  auto until = std::chrono::steady_clock::now() + 2s;
  for (int i = 0; i < 12; ++i)
    clients.emplace_back([&, i] {
      std::unique_ptr<raw_connection> c;
      while (std::chrono::steady_clock::now() < until) {
        try {
          if (!c)
            c = std::make_unique<raw_connection>(f.port);
          c->send(f.get());
        } catch (const std::exception&) {
          c.reset();
          continue;
        }
        auto asked = std::chrono::steady_clock::now();
        auto r = c->read_response(answered);
        if (r.status == 200)
          ++answered_200;
        else if (r.status == 0 && std::chrono::steady_clock::now() - asked >= answered)
          ++stuck; // neither answered nor closed
        else if (r.status != 0 && r.status != 503)
          ++other;
        if (r.status != 200)
          c.reset();
        std::this_thread::sleep_for(std::chrono::milliseconds(1 + i % 3));
      }
    });
  for (auto& t : clients)
    t.join();
  CHECK(stuck.load() == 0);
  CHECK(other.load() == 0);
  CHECK(answered_200.load() > 100);
  raw_connection probe(f.port);
  probe.send(f.get());
  CHECK(probe.read_response(answered).status == 200);
}

TEST_CASE("over the connection cap the longest-idle connection makes room") {
  gate_fixture f(1, 5, 5);
  std::vector<std::unique_ptr<raw_connection>> idle;
  for (int i = 0; i < 5; ++i) {
    idle.push_back(std::make_unique<raw_connection>(f.port));
    std::this_thread::sleep_for(20ms);
  }
  raw_connection newcomer(f.port);
  newcomer.send(f.get());
  CHECK(newcomer.read_response(answered).status == 200);
  CHECK(idle.front()->closed_within(answered)); // the oldest went
  // Now every connection has a request in progress: none to shed, so a newcomer gets 503 at once.
  dribblers busy(f.port, 0);
  for (auto& c : idle)
    c.reset();
  newcomer.send("POST /echo HTTP/1.1\r\n");
  dribblers slow(f.port, 4);
  std::this_thread::sleep_for(200ms);
  raw_connection refused(f.port);
  refused.send(f.get());
  auto r = refused.read_response(answered);
  CHECK(r.status == 503);
  CHECK(r.head.find("Retry-After: 1") != std::string::npos);
  CHECK(r.body.find(R"("code":"unavailable")") != std::string::npos);
}

TEST_CASE("over the connection cap, with none idle, the request arriving longest (over a second) "
          "makes room") {
  gate_fixture f(1, 5, 5, 10s);
  std::vector<std::unique_ptr<dribblers>> slow; // one after another: their requests start apart
  for (int i = 0; i < 5; ++i) {
    slow.push_back(std::make_unique<dribblers>(f.port, 1));
    std::this_thread::sleep_for(30ms);
  }
  std::this_thread::sleep_for(100ms); // the gate has read their first bytes
  // Requests less than a second on their way are not shed: a newcomer gets 503.
  raw_connection early(f.port);
  early.send(f.get());
  CHECK(early.read_response(answered).status == 503);
  std::this_thread::sleep_for(1100ms);
  for (auto& d : slow)
    d->dribble();
  for (int i = 0; i < 3; ++i) {
    raw_connection c(f.port);
    c.send(f.get());
    CHECK(c.read_response(answered).status == 200);
  }
  CHECK(slow.front()->conns.front()->closed_within(answered)); // the first to start went first
  CHECK_FALSE(slow.back()->conns.front()->closed_within(100ms));
}

TEST_CASE("framing limits are answered at once: 413, 431, 400, and the connection closed") {
  gate_fixture f;
  {
    raw_connection c(f.port); // the body is never sent: the declared length is enough
    c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
    auto r = c.read_response(answered);
    CHECK(r.status == 413);
    CHECK(r.body.find("server.maxBodyBytes") != std::string::npos);
    CHECK(c.closed_within(answered));
  }
  {
    raw_connection c(f.port);
    c.send("GET / HTTP/1.1\r\nX-Big: " + std::string(70 * 1024, 'a'));
    CHECK(c.read_response(answered).status == 431);
  }
  {
    raw_connection c(f.port);
    c.send("POST /echo HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n");
    CHECK(c.read_response(answered).status == 400);
  }
}

TEST_CASE("a request that cannot be read gets 400 and ends its connection: nothing pipelined "
          "behind it runs") {
  std::atomic<int> echoed{0}; // requests /echo ran
  conf::server_settings s;
  s.port = 0;
  s.threads = 1;
  http::listener l(s, "test");
  l.route("POST", "/echo", http::route_kind::api, http::access::open,
          [&](const httplib::Request&, httplib::Response& res) {
            ++echoed;
            res.set_content("{}", "application/json");
          });
  int port = l.bind(0);
  l.start();
  const std::string smuggled =
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n{}";
  const std::string unreadable[] = {
      // a space before the colon: the library would not take it for the body's length
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length : " + std::to_string(smuggled.size()) +
          "\r\n\r\n" + smuggled,
      // a request line the library refuses, asking to close: it must close anyway
      "GET / HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n" + smuggled,
      "G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n" + smuggled,
  };
  for (const auto& bytes : unreadable) {
    CAPTURE(bytes.substr(0, 40));
    raw_connection c(port);
    c.send(bytes);
    CHECK(c.read_response(answered).status == 400);
    CHECK(c.closed_within(answered));
  }
  CHECK(echoed == 0);
  l.stop();
}

TEST_CASE("an HTTP/1.1 request without one Host header is refused with 400; HTTP/1.0 needs none") {
  gate_fixture f(2);
  for (const char* path : {"/healthz", "/echo"}) { // run on the gate thread, and by a worker
    CAPTURE(path);
    const std::string method = std::string(path) == "/echo" ? "POST " : "GET ";
    const std::string body = method == "POST " ? "Content-Length: 2\r\nContent-Type: "
                                                 "application/json\r\n\r\n{}"
                                               : "\r\n";
    raw_connection missing(f.port);
    missing.send(method + path + " HTTP/1.1\r\n" + body);
    auto refused = missing.read_response(answered);
    CHECK(refused.status == 400);
    CHECK(refused.body.find("must send a Host header") != std::string::npos);
    raw_connection twice(f.port);
    twice.send(method + path + " HTTP/1.1\r\nHost: a\r\nHost: b\r\n" + body);
    CHECK(twice.read_response(answered).status == 400); // by the gate's framing over plain TCP
    raw_connection old(f.port);
    old.send(method + path + " HTTP/1.0\r\n" + body);
    CHECK(old.read_response(answered).status == 200);
  }
}

TEST_CASE("a field read as one value (a token, a key, a media type, an origin) given twice is "
          "refused with 400") {
  gate_fixture f(2);
  for (const char* field : {"Authorization: Bearer a", "Idempotency-Key: k-1",
                            "Content-Type: application/json", "Origin: http://a.example"}) {
    CAPTURE(field);
    raw_connection c(f.port);
    const std::string line = std::string(field) + "\r\n";
    c.send("POST /echo HTTP/1.1\r\nHost: localhost\r\n" + line + line +
           "Content-Length: 2\r\nContent-Type: application/json\r\n\r\n{}");
    auto refused = c.read_response(answered);
    CHECK(refused.status == 400);
    const std::string name(field, std::string_view(field).find(':'));
    CHECK(refused.body.find("the " + name + " header is given more than once") !=
          std::string::npos);
  }
}

TEST_CASE("a request line beyond the library's limit gets a JSON 414 with the usual headers") {
  gate_fixture f(2);
  raw_connection c(f.port);
  c.send(f.get("/healthz?pad=" + std::string(9000, 'a')));
  auto refused = c.read_response(answered);
  CHECK(refused.status == 414);
  CHECK(refused.body.find(R"("code":"uri_too_long")") != std::string::npos);
  CHECK(refused.body.find("the request line is longer than 8192 bytes") != std::string::npos);
  CHECK(refused.head.find("X-Content-Type-Options: nosniff") != std::string::npos);
  CHECK(c.closed_within(answered));
}

TEST_CASE("pipelined requests, Expect: 100-continue and chunked bodies are served") {
  gate_fixture f(2);
  raw_connection c(f.port);
  c.send(f.get() + f.post(R"({"n":1})") + f.get());
  CHECK(c.read_response(answered).status == 200);
  auto echoed = c.read_response(answered);
  CHECK(echoed.status == 200);
  CHECK(echoed.body == R"({"n":1})");
  CHECK(c.read_response(answered).status == 200);

  const std::string json = "Content-Type: application/json\r\n";
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\n" + json +
         "Expect: 100-continue\r\nContent-Length: 7\r\n\r\n");
  auto go_on = c.read_response(answered);
  CHECK(go_on.status == 100);
  c.send(R"({"n":2})");
  auto after = c.read_response(answered);
  CHECK(after.status == 200);
  CHECK(after.body == R"({"n":2})");

  c.send("POST /echo HTTP/1.1\r\nHost: x\r\n" + json +
         "Transfer-Encoding: chunked\r\n\r\n3\r\n{\"n\r\n4\r\n\":3}\r\n0\r\n\r\n");
  auto chunked = c.read_response(answered);
  CHECK(chunked.status == 200);
  CHECK(chunked.body == R"({"n":3})");
}

TEST_CASE("a stop while connections are open and requests dribble returns promptly") {
  auto f = std::make_unique<gate_fixture>(2);
  dribblers slow(f->port, 10);
  raw_connection kept(f->port);
  kept.send(f->get());
  REQUIRE(kept.read_response(answered).status == 200);
  f.reset(); // the destructor stops the listener; a hang fails the test by its timeout
  CHECK(kept.closed_within(answered));
}

TEST_CASE("deferred answers hold no thread: one thread serves forty of them at once, each "
          "answered once, after both of its waits") {
  gate_fixture f(1);
  std::vector<std::unique_ptr<raw_connection>> waiting;
  for (int i = 0; i < 40; ++i) {
    waiting.push_back(std::make_unique<raw_connection>(f.port));
    waiting.back()->send(f.get("/wait/400"));
  }
  // On a thread held through each wait the forty would take 40 x 800 ms; deferred, they all
  // wait at once.
  auto start = std::chrono::steady_clock::now();
  raw_connection other(f.port);
  other.send(f.get());
  CHECK(other.read_response(answered).status == 200); // while the forty wait
  for (auto& c : waiting) {
    auto r = c->read_response(answered + 800ms);
    CHECK(r.status == 200);
    CHECK(r.body == "steps 2, resumed");
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(std::chrono::steady_clock::now() - start >= 790ms); // both waits passed
  // Nothing else was sent (no answer of a deferring run), and the connections serve on.
  for (auto& c : waiting) {
    c->send(f.get());
    auto r = c->read_response(answered);
    CHECK(r.status == 200);
    CHECK(r.body == R"({"status":"ok"})");
  }
}

// The same deferring route served by a worker and (a partner's) on the gate thread.
const std::vector<std::string> wait_routes = {"/wait/", "/quick/wait/"};

TEST_CASE("a deferred request keeps its place among pipelined ones") {
  gate_fixture f(2);
  for (const auto& wait : wait_routes) {
    CAPTURE(wait);
    raw_connection c(f.port);
    c.send(f.get(wait + "50") + f.post(R"({"n":1})") + f.get(wait + "0") + f.get("/quick/big/3"));
    auto first = c.read_response(answered);
    CHECK(first.body == "steps 2, resumed");
    CHECK(c.read_response(answered).body == R"({"n":1})");
    CHECK(c.read_response(answered).body == "steps 2, resumed");
    CHECK(c.read_response(answered).body == "xxx");
  }
}

TEST_CASE("a stop answers the deferred requests at once, and defers nothing more") {
  for (const auto& wait : wait_routes) {
    CAPTURE(wait);
    auto f = std::make_unique<gate_fixture>(1);
    raw_connection c(f->port);
    c.send(f->get(wait + "60000"));
    std::this_thread::sleep_for(200ms); // deferred for a minute
    auto start = std::chrono::steady_clock::now();
    std::thread stopper([&] { f.reset(); });
    auto r = c.read_response(answered);
    stopper.join();
    CHECK(r.status == 200);
    CHECK(r.body == "steps 1, resumed");                   // its second wait could not be deferred
    CHECK(std::chrono::steady_clock::now() - start < 30s); // not the minute
  }
}

TEST_CASE("when the request first in line has waited half a second for a worker, a new one gets "
          "a 503 at once; the waiting one is still served, and the liveness probe all along") {
  gate_fixture f(1);
  raw_connection holder(f.port), queued(f.port), late(f.port), probe(f.port);
  holder.send(f.get("/sleep/2500")); // the one worker, for 2.5 s
  std::this_thread::sleep_for(100ms);
  queued.send(f.get("/sleep/0"));
  std::this_thread::sleep_for(800ms); // first in line for 800 ms now
  late.send(f.get("/sleep/0"));
  auto refused = late.read_response(answered);
  CHECK(refused.status == 503);
  CHECK(refused.body.find("busy") != std::string::npos);
  probe.send(f.get("/healthz")); // runs on the gate thread
  CHECK(probe.read_response(answered).status == 200);
  CHECK(holder.read_response(answered).body == "slept");
  CHECK(queued.read_response(answered).status == 200);
}

TEST_CASE("clients that hang up while their answer is deferred leave nothing behind: the "
          "connection cap has room again") {
  gate_fixture f(1, 10, 10);
  for (int wave = 0; wave < 4; ++wave) {
    {
      std::vector<std::unique_ptr<raw_connection>> gone;
      for (int i = 0; i < 10; ++i) {
        gone.push_back(std::make_unique<raw_connection>(f.port));
        gone.back()->send(f.get(wait_routes[wave % 2] + "100"));
      }
      std::this_thread::sleep_for(50ms); // all ten deferred; then they hang up
    }
    std::this_thread::sleep_for(400ms); // their answers fall due and find them gone
    raw_connection next(f.port);
    next.send(f.get());
    auto r = next.read_response(answered);
    CHECK(r.status == 200); // a leaked connection would fill the cap of 10: 503
  }
}

TEST_CASE("a simulated partner's requests run on the gate thread: answered, deferred ones too, "
          "while every worker is held; other requests wait for a worker") {
  gate_fixture f(1);
  raw_connection holder(f.port), partner(f.port), api(f.port);
  holder.send(f.get("/hold")); // the one worker, until released
  std::this_thread::sleep_for(100ms);
  api.send(f.get());
  for (int i = 0; i < 5; ++i) {
    partner.send(f.get("/quick/wait/20"));
    CHECK(partner.read_response(answered).body == "steps 2, resumed");
    partner.send(f.get("/quick/big/5"));
    CHECK(partner.read_response(answered).body == "xxxxx");
  }
  f.released = true;
  CHECK(holder.read_response(answered).body == "held");
  CHECK(api.read_response(answered).status == 200);
}

TEST_CASE("clients that never read their answers hold no worker: the rest of each answer waits in "
          "the gate, the one worker serves everyone else, and a non-reader is closed after "
          "server.writeTimeout") {
  gate_fixture f(1);
  auto closed = [] {
    return metrics::global().http_connections_refused.value({{"reason", "slow_reader"}});
  };
  const auto closed_before = closed();
  std::vector<std::unique_ptr<raw_connection>> stalled;
  for (int i = 0; i < 6; ++i) { // each would hold the worker for the write timeout
    stalled.push_back(std::make_unique<raw_connection>(f.port, 1024));
    std::string pipelined;
    for (int j = 0; j < 5; ++j)
      pipelined += f.get("/big/3000000");
    stalled.back()->send(pipelined);
  }
  std::this_thread::sleep_for(200ms);
  raw_connection other(f.port);
  for (int i = 0; i < 3; ++i) {
    other.send(f.get("/sleep/0"));
    CHECK(other.read_response(answered).body == "slept");
  }
  // A slow reader gets its answers whole, the pipelined ones after the first.
  raw_connection slow(f.port, 1024);
  slow.send(f.get("/big/3000000") + f.get("/sleep/0"));
  std::this_thread::sleep_for(300ms);
  auto big = slow.read_response(answered);
  CHECK(big.status == 200);
  CHECK(big.body.size() == 3000000);
  CHECK(big.body.find_first_not_of('y') == std::string::npos);
  CHECK(slow.read_response(answered).body == "slept");
  // The six that never read are closed once the write timeout (1.5 s) has passed.
  for (int i = 0; i < 100 && closed() < closed_before + 6; ++i)
    std::this_thread::sleep_for(50ms);
  CHECK(closed() == closed_before + 6);
}

TEST_CASE("clients that do not read answers beyond the budget of unsent answers hold at most a "
          "quarter of the workers: the others are closed at once, and everyone else is served") {
  gate_fixture f(4, 100, 100, 1500ms, 60s); // a worker would wait a minute for its client
  auto closed = [] {
    return metrics::global().http_connections_refused.value({{"reason", "slow_reader"}});
  };
  const auto closed_before = closed();
  std::vector<std::unique_ptr<raw_connection>> stalled;
  for (int i = 0; i < 10; ++i) { // 8 MB each: a few fill the 32 MiB of answers waiting
    stalled.push_back(std::make_unique<raw_connection>(f.port, 1024));
    stalled.back()->send(f.get("/big/8000000"));
  }
  std::this_thread::sleep_for(300ms);
  // With every worker waiting for one of them, this would wait the minute.
  raw_connection other(f.port);
  for (int i = 0; i < 3; ++i) {
    other.send(f.get("/sleep/0"));
    CHECK(other.read_response(answered).body == "slept");
  }
  // The ones beyond the budget and the workers' quarter were closed at once.
  for (int i = 0; i < 60 && closed() == closed_before; ++i)
    std::this_thread::sleep_for(50ms);
  CHECK(closed() > closed_before);
  stalled.clear(); // the worker waiting for one stops waiting
}

TEST_CASE("a partner's answer larger than the connection takes at once is finished by the gate "
          "thread as the client reads; one larger than the budget of unsent answers by a worker; "
          "the gate serves on meanwhile") {
  for (std::size_t size : {std::size_t{8} << 20, std::size_t{40} << 20}) {
    CAPTURE(size); // beyond the loopback socket buffers of both ends; then beyond 32 MiB
    gate_fixture f(2);
    raw_connection reader(f.port), other(f.port);
    reader.send(f.get(fmt::format("/quick/big/{}", size)));
    std::this_thread::sleep_for(200ms); // the gate sent what fit
    other.send(f.get("/quick/wait/10"));
    CHECK(other.read_response(answered).body == "steps 2, resumed");
    other.send(f.get());
    CHECK(other.read_response(answered).status == 200); // the other worker
    auto big = reader.read_response(answered);
    CHECK(big.status == 200);
    CHECK(big.body.size() == size);
    CHECK(big.body.find_first_not_of('x') == std::string::npos);
    reader.send(f.get("/quick/big/2")); // and the connection serves on
    CHECK(reader.read_response(answered).body == "xx");
  }
}

TEST_CASE("a route that is not a partner's runs on a worker even where a partner's route after it "
          "matches the same path") {
  gate_fixture f(1);
  raw_connection holder(f.port), partner(f.port);
  holder.send(f.get("/quick/held")); // the API route registered first: on the one worker
  std::this_thread::sleep_for(100ms);
  partner.send(f.get("/quick/wait/10")); // the gate thread is free
  CHECK(partner.read_response(answered).body == "steps 2, resumed");
  partner.send(f.get("/quick/other?x=1"));
  CHECK(partner.read_response(answered).body == "other");
  f.released = true;
  CHECK(holder.read_response(answered).body == "held");
}

TEST_CASE("a partner's request larger than 16 KiB runs on a worker: it waits while the worker is "
          "held, a small one does not") {
  gate_fixture f(1);
  raw_connection holder(f.port), large(f.port), small(f.port);
  holder.send(f.get("/hold"));
  std::this_thread::sleep_for(100ms);
  std::string pad; // five headers of 4 000 bytes (httplib caps one header line)
  for (int i = 0; i < 5; ++i)
    pad += fmt::format("X-Pad-{}: {}\r\n", i, std::string(4000, 'p'));
  large.send("GET /quick/big/4 HTTP/1.1\r\nHost: 127.0.0.1\r\n" + pad + "\r\n");
  small.send(f.get("/quick/big/2"));
  CHECK(small.read_response(answered).body == "xx");
  CHECK(large.read_response(300ms).status == 0); // on the gate thread it would have come at once
  f.released = true;
  CHECK(holder.read_response(answered).body == "held");
  CHECK(large.read_response(answered).body == "xxxx");
}
