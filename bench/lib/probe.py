"""A steady probe for bench/slow_clients.sh: GET URL at RATE requests a second on one keep-alive
connection for SECONDS (a slow answer skips the requests it delayed), then prints one JSON line: requests, p50/p99/max latency in ms, errors
(a request that fails or takes over 5 s counts as an error and reconnects).

    python3 probe.py URL RATE SECONDS
"""
import http.client
import json
import sys
import time
from urllib.parse import urlsplit

url, rate, seconds = urlsplit(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
latencies, errors, conn = [], 0, None
start = time.monotonic()
n = 0
while time.monotonic() - start < seconds:
    due = start + n / rate
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    # A request that took long skips the slots it missed: the probe never queues up.
    n = max(n + 1, int((time.monotonic() - start) * rate))
    t0 = time.monotonic()
    try:
        if conn is None:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
        conn.request("GET", url.path or "/")
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            errors += 1
        latencies.append((time.monotonic() - t0) * 1000)
    except (OSError, http.client.HTTPException):
        errors += 1
        conn = None

latencies.sort()
pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None
print(json.dumps({"requests": len(latencies), "p50_ms": pick(0.50), "p99_ms": pick(0.99),
                  "max_ms": round(latencies[-1], 3) if latencies else None, "non2xx": errors,
                  "socket_errors": 0}))
