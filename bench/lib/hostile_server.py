#!/usr/bin/env python3
"""A remote that answers every request (any method, any path) 200 with a body no client should
hold in memory (bench/hostile_rss.sh). Standard library only.

  hostile_server.py --port PORT --kind fast|chunked|trickle [--gigabytes N] [--stats FILE]

  fast     Content-Length: N GiB, streamed as fast as the socket takes it (one preallocated
           1 MiB chunk sent over and over)
  chunked  Transfer-Encoding: chunked, 1 MiB chunks without end (no length, no last chunk)
  trickle  Content-Length: N GiB, 256 bytes every 50 ms (the caller's deadline has to end it)

The body is JSON-looking text ("[0,0,0,..."), so the caller stores it as text. Every request is
read whole first (Content-Length body). On SIGTERM or SIGINT the counts go to --stats as JSON:
requests, connections, bytes sent, the most requests being answered at once.
"""
import argparse
import json
import signal
import socket
import socketserver
import sys
import threading
import time

CHUNK = b"[" + b"0," * (512 * 1024 - 1) + b"0"  # 1 MiB, allocated once
assert len(CHUNK) == 1 << 20


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.connections = 0
        self.bytes_sent = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def begin(self):
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def sent(self, n):
        with self.lock:
            self.bytes_sent += n

    def end(self):
        with self.lock:
            self.in_flight -= 1

    def as_dict(self):
        with self.lock:
            return {"requests": self.requests, "connections": self.connections,
                    "bytes_sent": self.bytes_sent, "max_in_flight": self.max_in_flight}


STATS = Stats()


def read_request(f):
    """Reads one request (line, headers, Content-Length body); False when the connection ended."""
    line = f.readline(65537)
    if not line:
        return False
    length = 0
    while True:
        h = f.readline(65537)
        if not h or h in (b"\r\n", b"\n"):
            break
        name, _, value = h.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip() or 0)
    if length:
        f.read(length)
    return True


class Handler(socketserver.StreamRequestHandler):
    kind = "fast"
    total = 1 << 30

    def handle(self):
        with STATS.lock:
            STATS.connections += 1
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while read_request(self.rfile):
            STATS.begin()
            try:
                self.answer()
            except OSError:
                return  # the caller hung up: the usual end
            finally:
                STATS.end()

    def answer(self):
        sock = self.connection
        if self.kind == "chunked":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            framed = b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n"
            while True:
                sock.sendall(framed)
                STATS.sent(len(CHUNK))
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % self.total)
        view = memoryview(CHUNK)
        left = self.total
        if self.kind == "trickle":
            while left > 0:
                n = min(256, left)
                sock.sendall(view[:n])
                STATS.sent(n)
                left -= n
                time.sleep(0.05)
        else:
            while left > 0:
                n = min(len(CHUNK), left)
                sock.sendall(view[:n])
                STATS.sent(n)
                left -= n


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--kind", choices=("fast", "chunked", "trickle"), default="fast")
    p.add_argument("--gigabytes", type=float, default=1.0)
    p.add_argument("--stats", help="file the counts are written to on exit")
    a = p.parse_args()
    Handler.kind = a.kind
    Handler.total = int(a.gigabytes * (1 << 30))
    server = Server(("127.0.0.1", a.port), Handler)

    def finish(*_):
        if a.stats:
            with open(a.stats, "w") as f:
                json.dump(STATS.as_dict(), f)
        print(f"[hostile-server] stopping: {json.dumps(STATS.as_dict())}", file=sys.stderr, flush=True)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    print(f"[hostile-server] 127.0.0.1:{a.port}: {a.kind}, {a.gigabytes} GiB bodies",
          file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
