#!/usr/bin/env python3
"""A TCP proxy in front of one upstream whose behaviour is switched at run time, to play a remote
that goes down (bench/outage.sh). Standard library only.

  outage_proxy.py --listen PORT --upstream HOST:PORT --control PORT

Modes (the proxy starts in `pass`):
  pass    listen, forward every connection to the upstream, byte for byte, both ways
  refuse  stop listening: a connect is refused by the kernel (the proxy cannot count those)
  hang    listen and accept, read every request, never answer
Every switch closes the connections accepted before it (a caller sees its connection cut), so a
kept-alive connection cannot carry traffic from one mode into the next.

The control port speaks HTTP on 127.0.0.1:
  PUT /mode/<pass|refuse|hang>   switch; answers once the new mode is in effect, with "at": the
                                 moment it took effect (seconds since the epoch)
  GET /stats                     {"mode", "by_mode": {mode: {"connections", "requests"}}, "switches"}
Requests are counted by reading the client's bytes as HTTP/1.1 (Content-Length or chunked bodies).
One log line per switch on stderr.
"""
import argparse
import json
import selectors
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("pass", "refuse", "hang")


def log(text):
    print(f"[outage-proxy {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


class RequestCounter:
    """Counts complete HTTP/1.1 requests in a byte stream (enough for libcurl's requests)."""

    def __init__(self, on_request):
        self.buf = b""
        self.need = None  # bytes still to skip for the current body; None = reading headers
        self.chunked = False
        self.on_request = on_request

    def feed(self, data):
        self.buf += data
        while True:
            if self.need is None:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buf) > 1 << 20:
                        self.buf = b""  # not HTTP: give up counting on this connection
                    return
                head = self.buf[:end].decode("latin-1").lower().split("\r\n")
                self.buf = self.buf[end + 4:]
                length, self.chunked = 0, False
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    if name.strip() == "content-length":
                        length = int(value.strip() or 0)
                    elif name.strip() == "transfer-encoding" and "chunked" in value:
                        self.chunked = True
                self.need = length
            if self.chunked:
                end = self.buf.find(b"0\r\n\r\n")
                if end < 0:
                    return
                self.buf = self.buf[end + 5:]
            else:
                if len(self.buf) < self.need:
                    return
                self.buf = self.buf[self.need:]
            self.need = None
            self.on_request()


class Proxy:
    def __init__(self, port, upstream):
        self.port = port
        self.upstream = upstream
        self.lock = threading.Lock()
        self.mode = "pass"
        self.generation = 0  # bumped by every switch; connections of older generations are cut
        self.conns = set()   # sockets of the current generation (client and upstream sides)
        self.stats = {m: {"connections": 0, "requests": 0} for m in MODES}
        self.switches = []
        self.listener = None
        self.applied = threading.Condition(self.lock)
        self.applied_generation = 0  # the last generation the accept loop has put into effect
        self.listener_changed_at = {}  # generation -> when the loop opened or closed the listener

    # --- mode changes ----------------------------------------------------------------------------

    def set_mode(self, mode):
        with self.lock:
            old = self.mode
            self.mode = mode
            self.generation += 1
            doomed = list(self.conns)
            self.conns.clear()
            switched_at = time.time()  # from here new connections get the new mode
            gen = self.generation
        for s in doomed:
            close(s)
        # the accept loop opens or closes the listening socket; wait until it has
        with self.lock:
            if not self.applied.wait_for(lambda: self.applied_generation >= gen, 5):
                raise RuntimeError("the accept loop did not apply the switch")
            # when the listening socket had to be opened or closed, the switch took effect then
            at = max(switched_at, self.listener_changed_at.get(gen, 0.0))
            self.switches.append({"at": at, "from": old, "to": mode})
        log(f"mode {old} -> {mode} (closed {len(doomed)} sockets)")
        return at

    # --- accept loop (owns the listening socket) -------------------------------------------------

    def run(self):
        sel = selectors.DefaultSelector()
        while True:
            with self.lock:
                want = self.mode != "refuse"
                gen = self.generation
            if want and self.listener is None:
                self.listener = self.bind()
                sel.register(self.listener, selectors.EVENT_READ)
                self.listener_changed_at[gen] = time.time()
            elif not want and self.listener is not None:
                sel.unregister(self.listener)
                self.listener.close()  # pending connections in the backlog get a reset
                self.listener = None
                self.listener_changed_at[gen] = time.time()
            with self.lock:
                self.applied_generation = gen
                self.applied.notify_all()
            if self.listener is None:
                time.sleep(0.02)
                continue
            if not sel.select(0.02):
                continue
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                mode, gen = self.mode, self.generation
                if mode == "refuse":  # switched between select and accept
                    close(client)
                    continue
                self.stats[mode]["connections"] += 1
                self.conns.add(client)
            threading.Thread(target=self.serve, args=(client, mode, gen), daemon=True).start()

    def bind(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for _ in range(100):
            try:
                s.bind(("127.0.0.1", self.port))
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"cannot bind 127.0.0.1:{self.port} again")
        s.listen(128)
        return s

    # --- one connection --------------------------------------------------------------------------

    def count_request(self, mode, gen):
        with self.lock:
            if gen == self.generation:
                self.stats[mode]["requests"] += 1

    def serve(self, client, mode, gen):
        counter = RequestCounter(lambda: self.count_request(mode, gen))
        if mode == "hang":
            # read and count, never answer, until the caller gives up or the mode changes
            pump(client, None, counter)
            self.forget(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
            upstream.settimeout(None)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            log(f"upstream {self.upstream[0]}:{self.upstream[1]} unreachable: {e}")
            self.forget(client)
            return
        with self.lock:
            if gen != self.generation:
                close(upstream)
                close(client)
                return
            self.conns.add(upstream)
        back = threading.Thread(target=pump, args=(upstream, client, None), daemon=True)
        back.start()
        pump(client, upstream, counter)
        back.join()
        self.forget(client)
        self.forget(upstream)

    def forget(self, s):
        with self.lock:
            self.conns.discard(s)
        close(s)


def pump(src, dst, counter):
    """Copies src to dst (dst None: reads and drops) until either side ends."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if counter is not None:
                counter.feed(data)
            if dst is not None:
                dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


def control_server(proxy, port):
    class Handler(BaseHTTPRequestHandler):
        def answer(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/stats":
                with proxy.lock:
                    body = {"mode": proxy.mode, "by_mode": json.loads(json.dumps(proxy.stats)),
                            "switches": list(proxy.switches)}
                self.answer(200, body)
            elif self.path == "/healthz":
                self.answer(200, {"mode": proxy.mode})
            else:
                self.answer(404, {"error": "GET /stats"})

        def do_PUT(self):
            parts = self.path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "mode" and parts[1] in MODES:
                at = proxy.set_mode(parts[1])
                self.answer(200, {"mode": parts[1], "at": at})
            else:
                self.answer(404, {"error": "PUT /mode/pass|refuse|hang"})

        do_POST = do_PUT

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", required=True, help="HOST:PORT")
    p.add_argument("--control", type=int, required=True)
    a = p.parse_args()
    host, _, port = a.upstream.rpartition(":")
    proxy = Proxy(a.listen, (host, int(port)))
    threading.Thread(target=proxy.run, daemon=True).start()
    server = control_server(proxy, a.control)
    log(f"127.0.0.1:{a.listen} -> {a.upstream}, control on 127.0.0.1:{a.control}, mode pass")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
