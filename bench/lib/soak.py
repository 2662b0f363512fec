#!/usr/bin/env python3
"""The soak benchmark's driver, sampler and report (bench/soak.sh). Standard library only.

  soak.py calibrate URL SECONDS OUT    orders through their whole life as fast as they complete
                                       (8 clients, at most 1 000 orders on their way at once): the
                                       peak, in orders/s completed, as one JSON object in OUT
  soak.py run URL PID RATE MINUTES OUT orders at RATE a second through their whole life (created,
                                       shipped once CONFIRMED, delivered, removed) for MINUTES,
                                       sampling once a minute: commit -> CONFIRMED p50/p99, drain
                                       rate, claim time, every table and index size, dead tuples,
                                       autovacuum runs, outboxd's RSS and database connections.
                                       The database is read with $PSQL (PGHOST/PGPORT/PGUSER,
                                       $SOAK_DB). One JSON object in OUT.
  soak.py report JSON MD PNGDIR        the Markdown table, the flatness verdict and, when gnuplot
                                       is there, the plots
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

ORDER = json.dumps({"customerId": "soak", "totalAmount": 42.5, "shippingType": "domestic"})
JSON = {"Content-Type": "application/json"}


class Api:
    """One keep-alive connection to outboxd."""

    def __init__(self, url):
        u = urlsplit(url)
        self.host, self.port, self.conn = u.hostname, u.port, None

    def call(self, method, path, body=None):
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                self.conn.request(method, path, body, JSON if body is not None else {})
                resp = self.conn.getresponse()
                data = resp.read()
                return resp.status, data
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
        return 0, b""


class Lifecycle:
    """Creates orders at a rate (or as fast as it can) and moves every CONFIRMED order on:
    shipped, delivered, removed, as a shop would over its life."""

    def __init__(self, url, rate, clients=8, in_flight=None):
        """`rate` orders a second (0: as fast as the clients go); with `in_flight`, no more than
        that many orders are on their way at once (a closed loop: what the system completes)."""
        self.url, self.rate, self.clients = url, rate, clients
        self.room = threading.Semaphore(in_flight) if in_flight else None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = {"created": 0, "shipped": 0, "delivered": 0, "removed": 0, "errors": 0}
        self.slot = 0

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def creator(self):
        api, start = Api(self.url), time.monotonic()
        while not self.stop.is_set():
            if self.rate:
                with self.lock:
                    slot, self.slot = self.slot, self.slot + 1
                if self.stop.wait(max(0.0, start + slot / self.rate - time.monotonic())):
                    return
            if self.room is not None:
                while not self.room.acquire(timeout=0.5):
                    if self.stop.is_set():
                        return
            status, _ = api.call("POST", "/api/orders", ORDER)
            self.count("created" if status == 201 else "errors")

    def mover(self, status, action, key):
        api = Api(self.url)
        while not self.stop.is_set():
            code, data = api.call("GET", f"/api/orders?status={status}&limit=500")
            moved = 0
            if code == 200:
                for o in json.loads(data)["orders"]:
                    if self.stop.is_set():
                        return
                    method, path, body = action(o["id"])
                    ok, _ = api.call(method, path, body)
                    if ok in (200, 202, 204):
                        moved += 1
                    elif ok != 409:  # 409: another step got there first
                        self.count("errors")
            self.count(key, moved)
            if key == "removed" and self.room is not None:
                for _ in range(moved):
                    self.room.release()
            if moved < 500:
                self.stop.wait(0.2)

    def start(self):
        self.threads = [threading.Thread(target=self.creator, daemon=True)
                        for _ in range(self.clients)]
        steps = [("CONFIRMED", lambda i: ("PUT", f"/api/orders/{i}/status", '{"status":"SHIPPED"}'),
                  "shipped"),
                 ("SHIPPED", lambda i: ("PUT", f"/api/orders/{i}/status", '{"status":"DELIVERED"}'),
                  "delivered"),
                 ("DELIVERED", lambda i: ("DELETE", f"/api/orders/{i}", None), "removed")]
        self.threads += [threading.Thread(target=self.mover, args=s, daemon=True) for s in steps]
        for t in self.threads:
            t.start()

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(35)

    def snapshot(self):
        with self.lock:
            return dict(self.counts)


def calibrate(url, seconds, out):
    life = Lifecycle(url, 0, in_flight=1000)
    life.start()
    warm = float(seconds) / 3
    time.sleep(warm)
    first, t0 = life.snapshot(), time.monotonic()
    time.sleep(float(seconds) - warm)
    last, t1 = life.snapshot(), time.monotonic()
    life.end()
    peak = (last["removed"] - first["removed"]) / (t1 - t0)
    with open(out, "w") as f:
        json.dump({"peak_orders_per_s": round(peak, 1),
                   "created_per_s": round((last["created"] - first["created"]) / (t1 - t0), 1),
                   "seconds": float(seconds)}, f)


# --- sampling ------------------------------------------------------------------------------------

STATE_SQL = """
SELECT json_build_object(
  'tables', (SELECT json_object_agg(relname, json_build_object(
       'bytes', pg_total_relation_size(relid), 'live', n_live_tup, 'dead', n_dead_tup,
       'autovacuums', autovacuum_count, 'autoanalyzes', autoanalyze_count))
     FROM pg_stat_user_tables WHERE relname <> 'schema_migrations'),
  'indexes', (SELECT json_object_agg(indexrelname, pg_relation_size(indexrelid))
     FROM pg_stat_user_indexes),
  'confirm', (SELECT json_build_object('n', count(*),
       'p50', percentile_cont(0.5) WITHIN GROUP (ORDER BY processed_at - created_at),
       'p99', percentile_cont(0.99) WITHIN GROUP (ORDER BY processed_at - created_at))
     FROM outbox_events WHERE status = 'PROCESSED' AND event_type = 'OrderCreated'
      AND processed_at >= now() - interval '60 seconds'),
  'connections', (SELECT count(*) FROM pg_stat_activity
     WHERE datname = current_database() AND application_name LIKE 'outboxd%'))
"""


def interval_ms(text):
    """A PostgreSQL interval as text ('00:00:00.012345') in milliseconds."""
    if text is None:
        return None
    h, m, s = text.split(":")
    return round((int(h) * 3600 + int(m) * 60 + float(s)) * 1000, 1)


def database_state():
    out = subprocess.run([os.environ["PSQL"], "-X", "-q", "-At", "-d", os.environ["SOAK_DB"],
                          "-c", STATE_SQL], capture_output=True, text=True, check=True).stdout
    state = json.loads(out)
    c = state["confirm"]
    # json_build_object writes intervals as text.
    c["p50"], c["p99"] = interval_ms(c["p50"]), interval_ms(c["p99"])
    return state


def scrape(url):
    """The counters and the claim histogram of outboxd's /metrics."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    processed, buckets, deleted = 0.0, {}, {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith("outboxd_events_processed_total"):
            processed += float(value)
        elif name.startswith("outboxd_claim_seconds_bucket"):
            le = name.split('le="')[1].split('"')[0]
            buckets[le] = buckets.get(le, 0.0) + float(value)
        elif name.startswith("outboxd_retention_deleted_total"):
            deleted[name.split('table="')[1].split('"')[0]] = float(value)
    return {"processed": processed, "buckets": buckets, "deleted": deleted}


def quantile_ms(before, after, q):
    """The upper bound of the bucket holding quantile q of the observations between two scrapes."""
    bounds = sorted((float("inf") if k == "+Inf" else float(k), k) for k in after)
    total = after.get("+Inf", 0) - before.get("+Inf", 0)
    if total <= 0:
        return None
    for bound, key in bounds:
        if after[key] - before.get(key, 0) >= q * total:
            return None if bound == float("inf") else round(bound * 1000, 1)
    return None


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def run(url, pid, rate, minutes, out):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    life = Lifecycle(url, float(rate))
    life.start()
    rows, metrics, counts, t_prev = [], scrape(url), life.snapshot(), time.monotonic()
    for minute in range(1, int(minutes) + 1):
        if stop.wait(max(0.0, t_prev + 60 - time.monotonic())):
            break
        now, m, c = time.monotonic(), scrape(url), life.snapshot()
        seconds = now - t_prev
        state = database_state()
        rows.append({
            "minute": minute,
            "orders_created_per_s": round((c["created"] - counts["created"]) / seconds, 1),
            "orders_removed_per_s": round((c["removed"] - counts["removed"]) / seconds, 1),
            "drain_events_per_s": round((m["processed"] - metrics["processed"]) / seconds, 1),
            "confirm_p50_ms": state["confirm"]["p50"], "confirm_p99_ms": state["confirm"]["p99"],
            "claim_p50_ms": quantile_ms(metrics["buckets"], m["buckets"], 0.5),
            "claim_p99_ms": quantile_ms(metrics["buckets"], m["buckets"], 0.99),
            "retention_deleted": {k: int(v - metrics["deleted"].get(k, 0))
                                  for k, v in m["deleted"].items()},
            "rss_mb": rss_mb(pid), "connections": state["connections"],
            "errors": c["errors"] - counts["errors"],
            "tables": state["tables"], "indexes": state["indexes"],
        })
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("tables", "indexes")}),
              file=sys.stderr, flush=True)
        metrics, counts, t_prev = m, c, now
    life.end()
    with open(out, "w") as f:
        json.dump({"rate_orders_per_s": float(rate), "minutes": rows}, f)


# --- report --------------------------------------------------------------------------------------

SERIES = ["drain_events_per_s", "confirm_p50_ms", "confirm_p99_ms", "claim_p99_ms", "rss_mb",
          "connections"]


def total_bytes(row):
    return sum(t["bytes"] for t in row["tables"].values())


def flatness(rows, window):
    """Each series' mean over the last `window` minutes against the `window` before; None when
    the run is too short."""
    if len(rows) < 2 * window:
        return None
    last, before = rows[-window:], rows[-2 * window:-window]
    out = {}
    series = SERIES + ["total_bytes"] + [f"table:{t}" for t in rows[-1]["tables"]] + \
        [f"dead:{t}" for t in rows[-1]["tables"]]

    def value(row, name):
        if name == "total_bytes":
            return total_bytes(row)
        if name.startswith("table:"):
            return row["tables"].get(name[6:], {}).get("bytes")
        if name.startswith("dead:"):
            return row["tables"].get(name[5:], {}).get("dead")
        return row.get(name)

    for name in series:
        a = [value(r, name) for r in before if value(r, name) is not None]
        b = [value(r, name) for r in last if value(r, name) is not None]
        if not a or not b:
            continue
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        out[name] = {"before": round(ma, 1), "last": round(mb, 1),
                     "change_pct": round((mb - ma) / ma * 100, 1) if ma else None}
    return out


def report(json_path, md_path, png_dir):
    data = json.load(open(json_path))
    rows = data["minutes"]
    if not rows:
        sys.exit("soak.py report: no minute was recorded")
    window = 10 if len(rows) >= 20 else max(1, len(rows) // 2)
    flat = flatness(rows, window)
    data["flatness"] = {"window_minutes": window, "series": flat}
    # Latency and dead-tuple counts are small numbers whose relative change is noise; the target
    # is about throughput, sizes and memory.
    judged = ["drain_events_per_s", "rss_mb", "total_bytes"] + \
        [f"table:{t}" for t in (rows[-1]["tables"] if rows else {})]
    if flat:
        worst = max((abs(flat[n]["change_pct"] or 0), n) for n in judged if n in flat)
        data["flatness"]["worst"] = {"series": worst[1], "change_pct": worst[0]}
        data["flatness"]["flat"] = worst[0] <= 10
    json.dump(data, open(json_path, "w"), indent=1)

    mb = lambda b: f"{b / 1048576:.1f}"
    tables = sorted(rows[-1]["tables"]) if rows else []
    lines = [f"# Soak: {len(rows)} minutes at {data['rate_orders_per_s']} orders/s",
             "", f"Settings: {data.get('settings', {})}", "",
             "| min | created/s | drain ev/s | confirm p50/p99 ms | claim p50/p99 ms | RSS MB | conns | "
             + " | ".join(f"{t} MB (dead)" for t in tables) + " |",
             "|" + "---|" * (7 + len(tables))]
    for r in rows:
        lines.append(
            f"| {r['minute']} | {r['orders_created_per_s']} | {r['drain_events_per_s']} | "
            f"{r['confirm_p50_ms']} / {r['confirm_p99_ms']} | {r['claim_p50_ms']} / "
            f"{r['claim_p99_ms']} | {r['rss_mb']} | {r['connections']} | "
            + " | ".join(f"{mb(r['tables'][t]['bytes'])} ({r['tables'][t]['dead']})"
                         for t in tables) + " |")
    lines += ["", f"Flatness, the last {window} minutes against the {window} before:", ""]
    if flat:
        lines += ["| series | before | last | change |", "|---|---|---|---|"]
        lines += [f"| {n} | {v['before']} | {v['last']} | {v['change_pct']} % |"
                  for n, v in flat.items()]
        lines += ["", f"Verdict: {'flat' if data['flatness']['flat'] else 'NOT flat'} (worst: "
                  f"{data['flatness']['worst']['series']}, {data['flatness']['worst']['change_pct']} %)."]
    else:
        lines.append("(too short to judge)")
    if rows:
        last = rows[-1]
        lines += ["", "Index sizes at the end (MB): " + ", ".join(
            f"{k} {mb(v)}" for k, v in sorted(last["indexes"].items()))]
    plots = plot(rows, png_dir, os.path.splitext(os.path.basename(md_path))[0])
    if plots:
        lines += [""] + [f"![{name}]({name})" for name in plots]
    open(md_path, "w").write("\n".join(lines) + "\n")


def plot(rows, png_dir, stem):
    """PNG plots with gnuplot (skipped when it is not installed); their file names."""
    if not rows or not png_dir or shutil.which("gnuplot") is None:
        return []
    tables = sorted(rows[-1]["tables"])
    dat = os.path.join(png_dir, f".{stem}.dat")
    with open(dat, "w") as f:
        for r in rows:
            cols = [r["minute"], r["drain_events_per_s"], r["confirm_p50_ms"] or 0,
                    r["confirm_p99_ms"] or 0, r["claim_p99_ms"] or 0, r["rss_mb"] or 0,
                    r["connections"]]
            cols += [r["tables"][t]["bytes"] / 1048576 for t in tables]
            cols += [r["tables"][t]["dead"] for t in tables]
            f.write(" ".join(str(c) for c in cols) + "\n")
    n = len(tables)
    charts = [
        ("rates", "events/s", [(2, "drain events/s")]),
        ("latency", "ms", [(3, "commit -> CONFIRMED p50"), (4, "commit -> CONFIRMED p99"),
                           (5, "claim p99")]),
        ("memory", "MB / connections", [(6, "outboxd RSS MB"), (7, "database connections")]),
        ("tables", "MB", [(8 + i, f"{t} (table + indexes)") for i, t in enumerate(tables)]),
        ("dead-tuples", "dead tuples", [(8 + n + i, t) for i, t in enumerate(tables)]),
    ]
    names = []
    for name, ylabel, series in charts:
        png = f"{stem}-{name}.png"
        script = (f"set terminal png size 900,420 noenhanced; set output '{os.path.join(png_dir, png)}';"
                  f"set xlabel 'minute'; set ylabel '{ylabel}'; set key outside; set grid;"
                  "plot " + ", ".join(f"'{dat}' using 1:{c} with linespoints title '{t}'"
                                      for c, t in series))
        subprocess.run(["gnuplot", "-e", script], check=True)
        names.append(png)
    os.remove(dat)
    return names


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"calibrate": calibrate, "run": run, "report": report}[cmd](*args)
