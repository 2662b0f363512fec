#!/usr/bin/env python3
"""Small helpers of bench/run.sh: free ports, simulator knobs, result parsing, statistics and the
report. Standard library only.

  bench.py ports N                    N free TCP ports on 127.0.0.1, one per line
  bench.py sim-config LATENCY         PUT /api/simulator/config body: no failures, LATENCY ms per
                                      call, or MIN-MAX: uniformly spread over [MIN, MAX] ms
  bench.py latency-mean LATENCY       the mean latency of LATENCY in ms (MIN-MAX: the midpoint)
  bench.py samples FILE               the peaks of wait_drained's samples, as one JSON object
  bench.py paced COMMITS CONFIRMED    commit -> CONFIRMED per order, as one JSON object
  bench.py field FILE KEY             the value of KEY in the one-line JSON object in FILE
  bench.py pick FILE ATTEMPTS         FILE's record with attempts and others_pct_attempts added
  bench.py thread-states PID          until SIGTERM, what PID's detached actors' threads (CAF's
                                      "caf.actor": processors, dead-letter processors, janitor,
                                      listener) are doing, sampled every 10 ms; then one line per
                                      thread that worked: its share of samples running (on a CPU
                                      or waiting for one), waiting on PostgreSQL (libpq's poll),
                                      waiting for calls (the call driver's epoll), in a futex
                                      (waiting for its mailbox when idle, or for a lock)
  bench.py pgbench-tps FILE           the tps figure of a pgbench output
  bench.py wake LEDGER COMMITS        commit -> first simulator request, as one JSON object
  bench.py report RAW JSON MD         aggregate raw.jsonl into latest.json and the Markdown table
  bench.py check JSON                 exit 0 only when JSON has every required key, and numbers in
                                      the main figures of each measure that ran
  bench.py emit FILE key=value...     append one JSON line to FILE (values parsed as JSON when
                                      they are; key=@PATH is the JSON in PATH, x=@PATH merges
                                      the object in PATH)
  bench.py meta FILE key=value...     the same, for the run's description: "versions.x=..." and
                                      "settings.x=..." go into nested objects
  bench.py sample URL FILE            scrapes outboxd's URL/metrics every second until SIGTERM
                                      (then once more); one JSON line per scrape into FILE
  bench.py burst SAMPLES START key=value...
                                      the burst measure's figures, as one JSON object: the
                                      database's figures (key=value) and, from the samples, the
                                      claim times and a per-second series from START (epoch s)
"""
import json
import math
import os
import platform
import re
import signal
import socket
import statistics
import sys
import time
import urllib.request

KNOBS = [
    "inventory.reserve", "inventory.release", "fraudCheck.check",
    "shipping.domestic.create", "shipping.domestic.cancel",
    "shipping.international.create", "shipping.international.cancel",
    "billing.charge", "billing.refund", "highValue.process", "highValue.cancel",
    "notifications.send",
]

REQUIRED_KEYS = [
    "intake_orders_per_s", "intake_pgbench_tps", "intake_ratio",
    "drain_events_per_s", "peer_drain_jobs_per_s", "drain_ratio_vs_peer",
    "drain_latency20_efficiency", "wake_p50_ms", "wake_p99_ms", "peer_wake_p50_ms",
    "peer_wake_p99_ms", "flat_cost_ratio", "rss_idle_mb", "rss_drain_mb",
    "drain_cpu_ms_per_event", "peer_drain_cpu_ms_per_event", "drain_cpu_ratio_vs_peer",
    "burst_orders", "burst_intake_orders_per_s", "burst_drain_events_per_s",
    "burst_preloaded_drain_events_per_s", "burst_drain_ratio", "burst_claim_p50_ms",
    "burst_claim_p99_ms", "burst_claim_p99_max_ms", "burst_series",
    "simulator_check", "slow_events_per_s", "peer_slow_jobs_per_s", "slow_efficiency",
    "peer_slow_efficiency", "slow_confirm_p99_ms", "peer_slow_confirm_p99_ms", "slow_partners",
    "versions", "settings",
]
# The measures of a run without --slow (settings.measures lists those of the run).
DEFAULT_MEASURES = ["intake", "memory", "drain", "flat", "wake", "burst"]
# Per measure, the figures the smoke test wants a number in when that measure ran (the rest may be
# null): plain numbers, or nested tables ({latency: {concurrency: ...}}) with at least one.
SMOKE_NUMBERS = {
    "intake": ["intake_orders_per_s", "intake_pgbench_tps", "intake_ratio"],
    "memory": ["rss_idle_mb"],
    "drain": ["rss_drain_mb", "drain_events_per_s", "drain_cpu_ms_per_event"],
    "burst": ["burst_intake_orders_per_s", "burst_preloaded_drain_events_per_s", "burst_claim_p99_ms"],
    "slow": ["simulator_check", "slow_events_per_s", "slow_confirm_p99_ms"],
}
# ... unless this setting is 0 (the paced load needs bench/peer's node_modules).
SMOKE_UNLESS = {"slow_confirm_p99_ms": "slow_paced"}
CPU_FIELDS = ["process", "postgres", "simulator", "total"]


def ports(n):
    socks = []
    for _ in range(int(n)):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    for s in socks:
        print(s.getsockname()[1])
        s.close()


def latency_range(spec):
    """"100" -> (100, 100); "20-500" -> (20, 500)."""
    lo, _, hi = str(spec).partition("-")
    return int(lo), int(hi or lo)


def latency_mean(spec):
    lo, hi = latency_range(spec)
    return (lo + hi) / 2


def sim_config(spec):
    lo, hi = latency_range(spec)
    latency = lo if lo == hi else [lo, hi]
    body = {"services": {k: {"failureRate": 0, "latencyMs": latency, "lateRate": 0, "failNext": 0}
                         for k in KNOBS}}
    print(json.dumps(body))


def samples(path):
    """wait_drained's samples, one "threads rss_kb name=n,name=n" line per poll: the peaks. The
    drain's connections are every client connection but the paced load's own (bench-intake)."""
    threads, rss, by_name, drain = 0, 0, {}, 0
    try:
        lines = open(path).read().split("\n")
    except FileNotFoundError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) < 2:
            continue
        threads = max(threads, int(parts[0]))
        rss = max(rss, int(parts[1]))
        total = 0
        if len(parts) > 2 and parts[2] != "-":
            for pair in parts[2].split(","):
                name, _, n = pair.partition("=")
                by_name[name] = max(by_name.get(name, 0), int(n))
                if name != "bench-intake":
                    total += int(n)
        drain = max(drain, total)
    print(json.dumps({"threads_max": threads or None, "rss_max_mb": round(rss / 1024, 1) if rss else None,
                      "db_connections_max": drain if by_name else None,
                      "db_connections_by_name_max": by_name}))


def paced(commits_path, confirmed_path):
    """Per order of the paced load: its CONFIRMED time (the updated_at of the confirming
    statement, the database's clock, which is the same system clock) minus the moment its COMMIT
    was acknowledged (intake.js)."""
    confirmed = {}
    for line in open(confirmed_path):
        if line.strip():
            oid, ms = line.strip().split("|")
            confirmed[oid] = float(ms)
    lat, commits, missing = [], [], 0
    for line in open(commits_path):
        if not line.strip():
            continue
        c = json.loads(line)
        commits.append(c["commitMs"])
        done = confirmed.get(str(c["orderId"]))
        if done is None:
            missing += 1
        else:
            lat.append(done - c["commitMs"])
    span = (max(commits) - min(commits)) / 1000 if len(commits) > 1 else None
    r = lambda v: None if v is None else round(v, 1)
    print(json.dumps({"n": len(lat), "missing": missing,
                      "fed_per_s": r((len(commits) - 1) / span) if span else None,
                      "p50_ms": r(percentile(lat, 50)), "p95_ms": r(percentile(lat, 95)),
                      "p99_ms": r(percentile(lat, 99)), "max_ms": r(max(lat) if lat else None)}))


def pgbench_tps(path):
    text = open(path).read()
    m = re.search(r"^tps = ([0-9.]+)", text, re.M)
    if not m:
        sys.exit(f"bench.py: no tps line in {path}")
    print(m.group(1))


def percentile(values, p):
    """Nearest-rank percentile of a list (p in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def wake(ledger_path, commits_path):
    """Latency from the client's commit acknowledgement to the first simulator request of the
    order (its inventory.reserve ledger entry). The ledger stamps whole milliseconds (floor), so
    half a millisecond is added to each arrival: the midpoint of the millisecond it fell in."""
    ledger = json.load(open(ledger_path))
    first = {}
    for e in ledger["entries"]:
        if e["operation"] == "inventory.reserve" and e["aggregateId"] not in first:
            first[e["aggregateId"]] = e["appliedAtMs"] + 0.5
    lat = []
    missing = 0
    for line in open(commits_path):
        if not line.strip():
            continue
        c = json.loads(line)
        arrival = first.get(str(c["orderId"]))
        if arrival is None:
            missing += 1
        else:
            lat.append(arrival - c["commitMs"])
    r = lambda v: None if v is None else round(v, 3)
    print(json.dumps({"n": len(lat), "missing": missing,
                      "p50_ms": r(percentile(lat, 50)), "p95_ms": r(percentile(lat, 95)),
                      "p99_ms": r(percentile(lat, 99)), "max_ms": r(max(lat) if lat else None),
                      "min_ms": r(min(lat) if lat else None)}))


# --- the burst measure -------------------------------------------------------------------------

METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(url):
    """The figures of one /metrics scrape: orders taken in, events processed, outbox events by
    status, and the outbox claim histogram (cumulative counts by upper bound)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {"t": time.time(), "intake": 0, "processed": 0, "pending": 0, "processing": 0,
           "claims": 0, "claim_seconds": 0.0, "claim_buckets": {}}
    for line in text.splitlines():
        m = METRIC_LINE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))
        if name == "outboxd_http_requests_total" and labels.get("method") == "POST" \
                and labels.get("route") == "/api/orders" and labels.get("status") == "201":
            out["intake"] += value
        elif name == "outboxd_events_processed_total":
            out["processed"] += value
        elif name == "outboxd_outbox_events" and labels.get("status") in ("PENDING", "PROCESSING"):
            out[labels["status"].lower()] = value
        elif labels.get("queue") == "outbox":
            if name == "outboxd_claim_seconds_bucket":
                out["claim_buckets"][labels["le"]] = value
            elif name == "outboxd_claim_seconds_count":
                out["claims"] = value
            elif name == "outboxd_claim_seconds_sum":
                out["claim_seconds"] = value
    return out


def sample(url, path):
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with open(path, "a") as f:
        next_at = time.monotonic()
        while True:
            try:
                f.write(json.dumps(scrape(url.rstrip("/") + "/metrics")) + "\n")
                f.flush()
            except OSError as e:  # a slow or refused scrape: the next one will tell
                print(f"bench.py sample: {e}", file=sys.stderr)
            if stopping:
                return
            next_at += 1
            time.sleep(max(0.0, next_at - time.monotonic()))


def bucket_quantile(q, buckets):
    """Prometheus' histogram_quantile over cumulative {upper bound: count}: linear within the
    bucket; in the +Inf bucket, the highest finite bound (a lower bound of the value)."""
    bounds = sorted(((math.inf if le == "+Inf" else float(le)), n) for le, n in buckets.items())
    if not bounds or bounds[-1][1] <= 0:
        return None
    rank = q * bounds[-1][1]
    lower, below = 0.0, 0.0
    for bound, n in bounds:
        if n >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (n - below) if n > below else 1)
        lower, below = bound, n
    return lower


def bucket_max(buckets):
    """The upper bound of the highest non-empty bucket: the longest claim took at most this (inf
    when one outlasted the last finite bound)."""
    bounds = sorted(((math.inf if le == "+Inf" else float(le)), n) for le, n in buckets.items())
    if not bounds or bounds[-1][1] <= 0:
        return None
    return next(bound for bound, n in bounds if n >= bounds[-1][1])


def minus(a, b):
    return {le: n - b.get(le, 0) for le, n in a.items()}


def ms(seconds, digits=2):
    return None if seconds is None else (None if math.isinf(seconds) else round(seconds * 1000, digits))


def burst(samples_path, start, *pairs):
    """Figures of one burst run: the database's figures given as key=value (intake and drain
    spans), the claim times of the whole run and per second, and a per-second series. The claim
    times count from the first sample (baseline=first) or from the process start (baseline=zero:
    the sampler started with the process)."""
    start = float(start)
    db = {k: parse_value(v) for k, v in (p.partition("=")[::2] for p in pairs)}
    from_first = db.pop("baseline", "first") == "first"
    rows = [json.loads(l) for l in open(samples_path) if l.strip()]
    series = []
    for a, b in zip(rows, rows[1:]):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        window = minus(b["claim_buckets"], a["claim_buckets"])
        series.append({
            "t": round(b["t"] - start, 1),
            "intake_per_s": round((b["intake"] - a["intake"]) / dt, 1),
            "drained_per_s": round((b["processed"] - a["processed"]) / dt, 1),
            "unfinished": int(b["pending"] + b["processing"]),
            "claims": int(b["claims"] - a["claims"]),
            "claim_p50_ms": ms(bucket_quantile(0.5, window)),
            "claim_p99_ms": ms(bucket_quantile(0.99, window)),
        })
    first = rows[0] if rows and from_first else {"claim_buckets": {}, "claims": 0}
    last = minus(rows[-1]["claim_buckets"], first["claim_buckets"]) if rows else {}
    p99s = [r["claim_p99_ms"] for r in series if r["claim_p99_ms"] is not None]
    out = dict(db)
    out.update({
        "claims": int(rows[-1]["claims"] - first["claims"]) if rows else 0,
        "claim_p50_ms": ms(bucket_quantile(0.5, last)),
        "claim_p99_ms": ms(bucket_quantile(0.99, last)),
        "claim_p99_max_ms": max(p99s) if p99s else None,
        # at most this; null when a claim outlasted the last bucket (120 s)
        "claim_max_ms": ms(bucket_max(last)),
        "series": series,
    })
    print(json.dumps(out))


# --- report ------------------------------------------------------------------------------------

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return None if a is None or not b else a / b


def rnd(v, digits=1):
    return None if v is None else round(v, digits)


def report(raw_path, json_path, md_path):
    rows = [json.loads(l) for l in open(raw_path) if l.strip()]
    meta = next((r for r in rows if r["kind"] == "meta"), {})
    of = lambda kind, **match: [r for r in rows if r["kind"] == kind
                                and all(r.get(k) == v for k, v in match.items())]

    def group(records):
        """{(latency key, concurrency): [records]}"""
        out = {}
        for r in records:
            out.setdefault((f"latency_{r['latency_ms']}ms", str(r["concurrency"])), []).append(r)
        return out

    def by_lat_conc(kv):
        (lat, conc), _ = kv
        return (latency_mean(lat.removeprefix("latency_").removesuffix("ms")), lat, int(conc))

    http = of("intake_http")
    intake_orders = median([r["orders_per_s"] for r in http])
    intake_pgbench = median([r["tps"] for r in of("intake_pgbench", system="outboxd")])
    peer_add_job = median([r["tps"] for r in of("intake_pgbench", system="peer")])

    drain = {"outboxd": {}, "peer": {}}
    drain_rss = {"outboxd": [], "peer": []}
    for r in of("drain", history=0):
        key = (f"latency_{r['latency_ms']}ms", str(r["concurrency"]))
        drain[r["system"]].setdefault(key, []).append(r["rate"])
        if r.get("rss_peak_mb") is not None:
            drain_rss[r["system"]].append(r["rss_peak_mb"])
    for r in of("drain"):
        if r["history"] and r.get("rss_peak_mb") is not None:
            drain_rss[r["system"]].append(r["rss_peak_mb"])

    def table(system):
        out = {}
        for (lat, conc), rates in sorted(drain[system].items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
            out.setdefault(lat, {})[conc] = rnd(median(rates))
        return out

    ours, peer = table("outboxd"), table("peer")
    vs_peer = {}
    for lat, by_conc in ours.items():
        for conc, rate in by_conc.items():
            vs_peer.setdefault(lat, {})[conc] = rnd(ratio(rate, peer.get(lat, {}).get(conc)), 2)
    efficiency = {}
    for conc, rate in ours.get("latency_20ms", {}).items():
        ideal = int(conc) / (4 * 0.020)
        efficiency[conc] = rnd(ratio(rate, ideal), 3)

    flat_runs = [r for r in of("drain", system="outboxd") if r["history"]]
    flat = None
    flat_ratio = None
    if flat_runs:
        f0 = flat_runs[0]
        loaded = median([r["rate"] for r in flat_runs])
        empty = median(drain["outboxd"].get((f"latency_{f0['latency_ms']}ms", str(f0["concurrency"])), []))
        flat_ratio = rnd(ratio(loaded, empty), 3)
        flat = {"history_events": f0["history"], "concurrency": f0["concurrency"],
                "latency_ms": f0["latency_ms"], "drain_events_per_s_loaded": rnd(loaded),
                "drain_events_per_s_empty": rnd(empty)}

    # CPU per event of the standard drains (every latency; the latency-0 ones are the figure)
    def cpu_table(system):
        out = {}
        for (lat, conc), recs in sorted(group(of("drain", system=system, history=0)).items(), key=by_lat_conc):
            if recs[0].get("cpu_total_ms") is None:
                continue
            cell = {f: rnd(median([r[f"cpu_{f}_ms"] for r in recs]), 3) for f in CPU_FIELDS}
            cell["others_pct"] = rnd(median([r.get("cpu_others_pct") for r in recs]))
            cell["load1"] = rnd(median([r.get("load1_start") for r in recs]), 2)
            out.setdefault(lat, {})[conc] = cell
        return out

    cpu_ours, cpu_peer = cpu_table("outboxd"), cpu_table("peer")
    cpu_ratio = {}
    for lat, by_conc in cpu_ours.items():
        for conc, cell in by_conc.items():
            other = cpu_peer.get(lat, {}).get(conc)
            if other:
                cpu_ratio.setdefault(lat, {})[conc] = {
                    "total": rnd(ratio(cell["total"], other["total"]), 2),
                    "process": rnd(ratio(cell["process"], other["process"]), 2)}

    # the simulator alone
    simcheck = {}
    for (lat, conc), recs in sorted(group(of("simcheck")).items(), key=by_lat_conc):
        rps = median([r["requests_per_s"] for r in recs])
        ideal_rps = recs[0]["ideal_per_s"]
        simcheck.setdefault(lat, {})[conc] = {
            "requests_per_s": rnd(rps), "ideal_per_s": ideal_rps, "share": rnd(ratio(rps, ideal_rps), 3),
            "p50_ms": rnd(median([r["p50_ms"] for r in recs])), "p99_ms": rnd(median([r["p99_ms"] for r in recs])),
            "errors": sum(r["non2xx"] + r["socket_errors"] for r in recs),
            "simulator_cpu_ms_per_request": rnd(median([r["simulator_cpu_ms_per_request"] for r in recs]), 3),
            "machine_busy_pct": rnd(median([r["machine_busy_pct"] for r in recs])),
            "simulator_threads": recs[0].get("simulator_threads"),
            "load1": rnd(median([r.get("load1_start") for r in recs]), 2)}

    # slow partners: backlog drains and paced loads, per latency, concurrency and system
    slow = {}
    for system in ("outboxd", "peer"):
        drains = group(of("slow_drain", system=system))
        paced_runs = group(of("slow_paced", system=system))
        for (lat, conc), recs in sorted(drains.items(), key=by_lat_conc):
            lat_ms = recs[0]["latency_ms"]
            ideal_rate = int(conc) / (4 * latency_mean(lat_ms) / 1000)
            cell = {"ideal_per_s": rnd(ideal_rate)}
            if recs[0].get("refused"):
                cell["refused"] = recs[0]["refused"]
            else:
                m = lambda f, d=1: rnd(median([r.get(f) for r in recs]), d)
                rate = median([r["rate"] for r in recs])
                by_name = {}
                for r in recs:
                    for name, n in (r.get("db_connections_by_name_max") or {}).items():
                        by_name[name] = max(by_name.get(name, 0), n)
                cell.update({
                    "processors": recs[0].get("processors"),
                    "calls_in_flight_per_processor": recs[0].get("calls_in_flight_per_processor"),
                    "orders": recs[0]["events"], "events_per_s": rnd(rate),
                    "efficiency": rnd(ratio(rate, ideal_rate), 3),
                    "steady_events_per_s": m("steady_rate"),
                    "steady_efficiency": rnd(ratio(median([r.get("steady_rate") for r in recs]),
                                                   ideal_rate), 3),
                    "inflight_p50_ms": m("inflight_p50_ms"), "inflight_p99_ms": m("inflight_p99_ms"),
                    "rss_peak_mb": rnd(max(r["rss_peak_mb"] for r in recs)),
                    "threads_max": max((r.get("threads_max") or 0) for r in recs) or None,
                    "db_connections_max": max((r.get("db_connections_max") or 0) for r in recs) or None,
                    "db_connections_by_name_max": by_name,
                    "cpu_ms_per_event": {f: m(f"cpu_{f}_ms", 3) for f in CPU_FIELDS},
                    "cpu_others_pct": m("cpu_others_pct"), "load1": m("load1_start", 2)})
            p = paced_runs.get((lat, conc))
            if p:
                mp = lambda f, d=1: rnd(median([r.get(f) for r in p]), d)
                cell["paced"] = {
                    "orders": p[0]["orders"], "offered_per_s": p[0]["offered_per_s"],
                    "fed_per_s": mp("fed_per_s"), "commit_to_confirmed_p50_ms": mp("p50_ms"),
                    "commit_to_confirmed_p95_ms": mp("p95_ms"), "commit_to_confirmed_p99_ms": mp("p99_ms"),
                    "commit_to_confirmed_max_ms": mp("max_ms"),
                    "threads_max": max((r.get("threads_max") or 0) for r in p) or None,
                    "db_connections_max": max((r.get("db_connections_max") or 0) for r in p) or None,
                    "load1": mp("load1_start", 2)}
            slow.setdefault(lat, {}).setdefault(conc, {})[system] = cell

    def slow_figure(system, field, paced_field=None):
        out = {}
        for lat, by_conc in slow.items():
            for conc, cells in by_conc.items():
                cell = cells.get(system)
                if cell is None:
                    continue
                v = (cell.get("paced") or {}).get(paced_field) if paced_field else cell.get(field)
                out.setdefault(lat, {})[conc] = v
        return out

    slow_ours, slow_peer = slow_figure("outboxd", "events_per_s"), slow_figure("peer", "events_per_s")
    slow_vs_peer = {}
    for lat, by_conc in slow_ours.items():
        for conc, rate in by_conc.items():
            slow_vs_peer.setdefault(lat, {})[conc] = rnd(ratio(rate, slow_peer.get(lat, {}).get(conc)), 2)

    def wake_of(system, field):
        return rnd(median([r[field] for r in of("wake", system=system)]), 3)

    burst_figures = burst_report(of("burst"))

    idle = lambda system: rnd(median([r["mb"] for r in of("rss_idle", system=system)]))
    peak = lambda system: rnd(max(drain_rss[system])) if drain_rss[system] else None

    result = {
        "mode": meta.get("mode"),
        "date": meta.get("date"),
        "intake_orders_per_s": rnd(intake_orders),
        "intake_p50_ms": rnd(median([r["p50_ms"] for r in http]), 3),
        "intake_p99_ms": rnd(median([r["p99_ms"] for r in http]), 3),
        "intake_pgbench_tps": rnd(intake_pgbench),
        "intake_ratio": rnd(ratio(intake_orders, intake_pgbench), 3),
        "peer_intake_add_job_tps": rnd(peer_add_job),
        "drain_events_per_s": ours,
        "peer_drain_jobs_per_s": peer,
        "drain_ratio_vs_peer": vs_peer,
        "drain_latency20_efficiency": efficiency,
        "wake_p50_ms": wake_of("outboxd", "p50_ms"),
        "wake_p95_ms": wake_of("outboxd", "p95_ms"),
        "wake_p99_ms": wake_of("outboxd", "p99_ms"),
        "peer_wake_p50_ms": wake_of("peer", "p50_ms"),
        "peer_wake_p95_ms": wake_of("peer", "p95_ms"),
        "peer_wake_p99_ms": wake_of("peer", "p99_ms"),
        "flat_cost_ratio": flat_ratio,
        "flat_cost": flat,
        "rss_idle_mb": idle("outboxd"),
        "rss_drain_mb": peak("outboxd"),
        "peer_rss_idle_mb": idle("peer"),
        "peer_rss_drain_mb": peak("peer"),
        "drain_cpu_ms_per_event": cpu_ours,
        "peer_drain_cpu_ms_per_event": cpu_peer,
        "drain_cpu_ratio_vs_peer": cpu_ratio,
        "simulator_check": simcheck,
        "slow_events_per_s": slow_ours,
        "peer_slow_jobs_per_s": slow_peer,
        "slow_ratio_vs_peer": slow_vs_peer,
        "slow_efficiency": slow_figure("outboxd", "efficiency"),
        "peer_slow_efficiency": slow_figure("peer", "efficiency"),
        "slow_confirm_p99_ms": slow_figure("outboxd", None, "commit_to_confirmed_p99_ms"),
        "peer_slow_confirm_p99_ms": slow_figure("peer", None, "commit_to_confirmed_p99_ms"),
        "slow_partners": slow,
    }
    result.update(burst_figures)
    result["versions"] = meta.get("versions", {})
    result["settings"] = meta.get("settings", {})
    result["targets"] = targets(result)
    result["runs"] = [r for r in rows if r["kind"] != "meta"]
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(md_path, "w") as f:
        f.write(markdown(result))


def burst_report(runs):
    """The burst measure's figures: medians over the runs; the per-second series of the run with
    the median overall drain rate."""
    def rates(r):
        b, p = r["burst"], r["preloaded"]
        after_events = b["orders"] - b["during_events"]
        return {
            "intake": ratio(b["orders"], b["intake_seconds"]),
            "during": ratio(b["during_events"], b["intake_seconds"]),
            # nothing left at the end of the intake: the drain kept up, there is no "after"
            "after": ratio(after_events, b["after_seconds"]) if after_events > 0 else None,
            "overall": ratio(b["orders"], b["intake_seconds"] + max(b["after_seconds"], 0)),
            "preloaded": ratio(p["events"], p["seconds"]),
        }
    per_run = [rates(r) for r in runs]
    med = lambda k: median([x[k] for x in per_run])
    of_burst = lambda k: median([r["burst"][k] for r in runs])
    preloaded = med("preloaded")
    drain = {k: rnd(med(k)) for k in ("during", "after", "overall")}
    series = None
    if runs:
        overall = sorted(range(len(runs)), key=lambda i: per_run[i]["overall"] or 0)
        series = runs[overall[len(runs) // 2]]["burst"]["series"]
    max_ms = [r["burst"]["claim_max_ms"] for r in runs]
    return {
        "burst_orders": of_burst("orders"),
        "burst_intake_orders_per_s": rnd(med("intake")),
        "burst_drain_events_per_s": drain,
        "burst_preloaded_drain_events_per_s": rnd(preloaded),
        "burst_drain_ratio": {k: rnd(ratio(med(k), preloaded), 3) for k in drain},
        "burst_claim_p50_ms": of_burst("claim_p50_ms"),
        "burst_claim_p99_ms": of_burst("claim_p99_ms"),
        # the worst second of any run, and the longest claim of any run (null: over 120 s)
        "burst_claim_p99_max_ms": max([r["burst"]["claim_p99_max_ms"] or 0 for r in runs], default=None),
        "burst_claim_max_ms": None if None in max_ms else max(max_ms, default=None),
        "burst_preloaded_claim_p99_ms": median([r["preloaded"]["claim_p99_ms"] for r in runs]),
        "burst_series": series,
    }


def targets(r):
    """The performance targets: True/False, or None when the figure was not measured."""
    def at_least(v, bound):
        return None if v is None else v >= bound

    def at_most(v, bound):
        return None if v is None else v <= bound

    lat0 = r["drain_ratio_vs_peer"].get("latency_0ms", {})
    eff = r["drain_latency20_efficiency"]
    wake_ok = None
    if None not in (r["wake_p50_ms"], r["wake_p99_ms"], r["peer_wake_p50_ms"], r["peer_wake_p99_ms"]):
        wake_ok = r["wake_p50_ms"] <= r["peer_wake_p50_ms"] and r["wake_p99_ms"] <= r["peer_wake_p99_ms"]
    all_of = lambda vals: None if not vals or None in vals else all(vals)
    return {
        "intake >= 0.7x pgbench": at_least(r["intake_ratio"], 0.7),
        "drain >= 3x graphile-worker (latency 0)": all_of([at_least(v, 3.0) for v in lat0.values()]),
        "drain with 20 ms >= 90% of concurrency/(4x20 ms)": all_of([at_least(v, 0.9) for v in eff.values()]),
        "wake-up p50 and p99 <= graphile-worker": wake_ok,
        "flat cost >= 0.9": at_least(r["flat_cost_ratio"], 0.9),
        "RSS idle <= 50 MB": at_most(r["rss_idle_mb"], 50),
        "RSS draining <= 100 MB": at_most(r["rss_drain_mb"], 100),
        "burst: drain during and after >= 80% of pre-loaded": all_of(
            [at_least(v, 0.8) for k, v in r["burst_drain_ratio"].items() if k != "overall"
             and r["burst_drain_events_per_s"][k] is not None]),
        "burst: claim p99 < 50 ms every second": None if r["burst_claim_p99_max_ms"] is None
        else r["burst_claim_p99_max_ms"] < 50,
        "machine CPU per event (latency 0) <= 1/3 of graphile-worker's": all_of(
            [at_most((c or {}).get("total"), 1 / 3)
             for c in r["drain_cpu_ratio_vs_peer"].get("latency_0ms", {}).values()]),
        "slow partners: >= 90% of the ideal at every latency and concurrency": all_of(
            [at_least(v, 0.9) for by_conc in r["slow_efficiency"].values()
             for v in by_conc.values()]),
        "slow partners: RSS <= 150 MB": all_of(
            [at_most(cells["outboxd"].get("rss_peak_mb"), 150)
             for by_conc in r["slow_partners"].values() for cells in by_conc.values()
             if "outboxd" in cells and not cells["outboxd"].get("refused")]),
    }


def markdown(r):
    f = lambda v, unit="": "–" if v is None else f"{v:g}{unit}"
    s = r["settings"]
    v = r["versions"]
    measures = (s.get("measures") or " ".join(DEFAULT_MEASURES)).split()
    lines = [
        f"# outboxd benchmark, {r['date']} ({r['mode']}{'' if set(measures) >= set(DEFAULT_MEASURES) else ': ' + ', '.join(measures)})",
        "",
        f"Median of {s.get('runs')} run(s) per figure. outboxd {v.get('outboxd', '?')} (commit "
        f"{v.get('commit', '?')}), PostgreSQL {v.get('postgresql', '?')}, graphile-worker "
        f"{v.get('graphile_worker', '–')} on node {v.get('node', '–')}, {v.get('cpus', '?')} CPUs "
        f"({v.get('cpu_model', '?')}), kernel {v.get('kernel', '?')}.",
        f"Durable PostgreSQL defaults (fsync={s.get('fsync')}, synchronous_commit="
        f"{s.get('synchronous_commit')}); all simulator failure rates 0. Load average at the start: "
        f"{s.get('load_average_at_start', '?')}.",
        "",
        "## Summary against the targets",
        "",
        "| target | result |",
        "|---|---|",
    ]
    for name, ok in r["targets"].items():
        lines.append(f"| {name} | {'not measured' if ok is None else ('met' if ok else 'NOT met')} |")
    if "intake" in measures:
        lines += [
            "",
            "## Intake (8 keep-alive clients)",
            "",
            "| measure | value |",
            "|---|---|",
            f"| outboxd POST /api/orders | {f(r['intake_orders_per_s'])} orders/s, p50 {f(r['intake_p50_ms'], ' ms')}, p99 {f(r['intake_p99_ms'], ' ms')} |",
            f"| pgbench -M prepared, same two-row transaction | {f(r['intake_pgbench_tps'])} tx/s |",
            f"| ratio outboxd / pgbench | {f(r['intake_ratio'])} |",
            f"| pgbench, order + graphile_worker.add_job | {f(r['peer_intake_add_job_tps'])} tx/s |",
        ]
    if r["drain_events_per_s"]:
        lines += [
            "",
            f"## Drain ({s.get('drain_orders')} pre-loaded orders, 4 calls + 4 audit rows each)",
            "",
            "| sink latency | concurrency | outboxd events/s | graphile-worker jobs/s | ratio | efficiency vs concurrency/(4×latency) |",
            "|---|---|---|---|---|---|",
        ]
        for lat, by_conc in r["drain_events_per_s"].items():
            for conc, rate in by_conc.items():
                peer = r["peer_drain_jobs_per_s"].get(lat, {}).get(conc)
                ratio_v = r["drain_ratio_vs_peer"].get(lat, {}).get(conc)
                eff = r["drain_latency20_efficiency"].get(conc) if lat == "latency_20ms" else None
                lines.append(f"| {lat.removeprefix('latency_')} | {conc} | {f(rate)} | {f(peer)} | {f(ratio_v)} | {f(eff)} |")
    cpu0 = r["drain_cpu_ms_per_event"].get("latency_0ms", {})
    if cpu0:
        peer0 = r["peer_drain_cpu_ms_per_event"].get("latency_0ms", {})
        ratio0 = r["drain_cpu_ratio_vs_peer"].get("latency_0ms", {})
        split = lambda c: "–" if not c else (f"**{c['total']:g}** = {f(c['process'])} + {f(c['postgres'])} + "
                                             f"{f(c['simulator'])}")
        lines += [
            "",
            "## CPU per event (the latency-0 drains above)",
            "",
            "CPU milliseconds per delivered event: **total** = the system's process + every process of the "
            "bench's PostgreSQL cluster + the simulator (user + system time from /proc, the system's "
            "start-up taken off). *others* is the share of the 2 CPUs used meanwhile by anything else "
            "(other work on the machine, the harness's psql polls).",
            "",
            "| concurrency | outboxd events/s | outboxd ms/event = outboxd + PostgreSQL + simulator | graphile-worker jobs/s | graphile-worker ms/event = node + PostgreSQL + simulator | total outboxd : peer | process outboxd : peer | others, load1 (outboxd / peer) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for conc, c in cpu0.items():
            p = peer0.get(conc)
            q = ratio0.get(conc, {})
            lines.append(
                f"| {conc} | {f(r['drain_events_per_s'].get('latency_0ms', {}).get(conc))} | {split(c)} | "
                f"{f(r['peer_drain_jobs_per_s'].get('latency_0ms', {}).get(conc))} | {split(p)} | "
                f"{f(q.get('total'))} | {f(q.get('process'))} | {f(c['others_pct'], '%')} {f(c['load1'])} / "
                f"{f((p or {}).get('others_pct'), '%')} {f((p or {}).get('load1'))} |")
    if "wake" in measures:
        lines += [
            "",
            f"## Wake-up ({s.get('wake_orders')} orders at {s.get('wake_rate')}/s into an idle system, "
            f"concurrency {s.get('wake_concurrency')})",
            "",
            "| system | p50 | p95 | p99 |",
            "|---|---|---|---|",
            f"| outboxd | {f(r['wake_p50_ms'], ' ms')} | {f(r['wake_p95_ms'], ' ms')} | {f(r['wake_p99_ms'], ' ms')} |",
            f"| graphile-worker | {f(r['peer_wake_p50_ms'], ' ms')} | {f(r['peer_wake_p95_ms'], ' ms')} | {f(r['peer_wake_p99_ms'], ' ms')} |",
        ]
    if {"flat", "memory", "drain"} & set(measures):
        fc = r["flat_cost"] or {}
        lines += [
            "",
            "## Flat cost and memory",
            "",
            "| measure | value |",
            "|---|---|",
            f"| drain with {f(fc.get('history_events'))} PROCESSED events + audit rows / empty tables "
            f"(concurrency {f(fc.get('concurrency'))}) | {f(fc.get('drain_events_per_s_loaded'))} / "
            f"{f(fc.get('drain_events_per_s_empty'))} = {f(r['flat_cost_ratio'])} |",
            f"| outboxd peak RSS idle / draining | {f(r['rss_idle_mb'], ' MB')} / {f(r['rss_drain_mb'], ' MB')} |",
            f"| graphile-worker peak RSS idle / draining | {f(r['peer_rss_idle_mb'], ' MB')} / {f(r['peer_rss_drain_mb'], ' MB')} |",
        ]
    lines += burst_markdown(r, f)
    lines += slow_markdown(r, f)
    lines += [
        "",
        "Settings: `" + json.dumps(s, sort_keys=True) + "`",
        "",
    ]
    return "\n".join(lines)


def burst_markdown(r, f):
    if r["burst_orders"] is None:
        return []
    d, q = r["burst_drain_events_per_s"], r["burst_drain_ratio"]
    lines = [
        "",
        f"## Burst ({f(r['burst_orders'])} orders posted by {r['settings'].get('intake_clients')} "
        f"keep-alive connections into an idle outboxd that drains them as they come, after it "
        f"drained as many pre-loaded; outbox.poolSize={r['settings'].get('burst_pool_size')})",
        "",
        "| measure | value |",
        "|---|---|",
        f"| intake | {f(r['burst_intake_orders_per_s'])} orders/s |",
        f"| drain during the intake / after it / overall | {f(d['during'])} / {f(d['after'])} / "
        f"{f(d['overall'])} events/s |",
        f"| the same backlog pre-loaded | {f(r['burst_preloaded_drain_events_per_s'])} events/s, "
        f"claim p99 {f(r['burst_preloaded_claim_p99_ms'], ' ms')} |",
        f"| ratio to pre-loaded: during / after / overall | {f(q['during'])} / {f(q['after'])} / "
        f"{f(q['overall'])} |",
        f"| claim p50 / p99 over the burst | {f(r['burst_claim_p50_ms'], ' ms')} / "
        f"{f(r['burst_claim_p99_ms'], ' ms')} |",
        f"| claim p99 in the worst second / longest claim (at most) | "
        f"{f(r['burst_claim_p99_max_ms'], ' ms')} / {f(r['burst_claim_max_ms'], ' ms')} |",
    ]
    if r["burst_series"]:
        lines += [
            "",
            "Per second (the run with the median overall drain; t from the first request):",
            "",
            "| t (s) | intake/s | drained/s | unfinished | claims | claim p50 | claim p99 |",
            "|---|---|---|---|---|---|---|",
        ]
        for x in r["burst_series"]:
            lines.append(f"| {x['t']:g} | {x['intake_per_s']:g} | {x['drained_per_s']:g} | "
                         f"{x['unfinished']} | {x['claims']} | {f(x['claim_p50_ms'], ' ms')} | "
                         f"{f(x['claim_p99_ms'], ' ms')} |")
    return lines


def slow_markdown(r, f):
    s = r["settings"]
    lines = []
    if r["simulator_check"]:
        lines += [
            "",
            "## Slow partners",
            "",
            f"Both systems get at most {s.get('slow_connections')} database connections in all "
            f"(outboxd: `outbox.connections` = {s.get('slow_connections', 3) - 3}, `database.poolSize` = 2, "
            f"the listener; graphile-worker: its pool's `max`). Concurrency is calls in flight: outboxd's "
            f"`outbox.poolSize` × `outbox.callsInFlight` (processors × calls each, shown as P×C; at most "
            f"{s.get('slow_connections')} processors), graphile-worker's `concurrency`. Ideal = "
            f"concurrency / (4 calls × mean latency). Backlog: {s.get('slow_seconds_at_ideal')} s at the ideal rate, at most "
            f"{s.get('slow_max_orders')} orders. Drains and paced loads: median of "
            f"{s.get('slow_runs', s.get('runs'))} run(s); the simulator check: one run.",
            "",
            "### The simulator alone",
            "",
            "`wrk` with that many keep-alive connections sending inventory reservations back to back "
            "(`bench/lib/sim-load.lua`), against the ideal concurrency / latency requests/s.",
            "",
            "| latency ms | connections | simulator threads | requests/s | ideal | share | p50 / p99 ms | simulator CPU ms/request | machine busy | load1 |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for lat, by_conc in r["simulator_check"].items():
            for conc, c in by_conc.items():
                lines.append(
                    f"| {lat.removeprefix('latency_').removesuffix('ms')} | {conc} | {f(c['simulator_threads'])} | "
                    f"{f(c['requests_per_s'])} | {f(c['ideal_per_s'])} | {f(c['share'])} | "
                    f"{f(c['p50_ms'])} / {f(c['p99_ms'])} | {f(c['simulator_cpu_ms_per_request'])} | "
                    f"{f(c['machine_busy_pct'], '%')} | {f(c['load1'])} |")
    if r["slow_partners"]:
        lines += [
            "",
            "### Backlog drains",
            "",
            "| latency ms | concurrency | system | orders | events/s | ideal | efficiency | steady: events/s, efficiency | in flight p50 / p99 ms | CPU ms/event (process + PG + sim) | peak RSS | threads | DB connections | others, load1 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        names = {"outboxd": "outboxd", "peer": "graphile-worker"}
        for lat, by_conc in r["slow_partners"].items():
            for conc, cells in by_conc.items():
                for system, c in cells.items():
                    split = (f" ({c['processors']}×{c['calls_in_flight_per_processor']})"
                             if c.get("processors") and system == "outboxd" else "")
                    head = f"| {lat.removeprefix('latency_').removesuffix('ms')} | {conc}{split} | {names[system]} |"
                    if c.get("refused"):
                        lines.append(f"{head} – | not possible: {c['refused']} | {f(c['ideal_per_s'])} | | | | | | | | |")
                        continue
                    cpu = c["cpu_ms_per_event"]
                    conns = ", ".join(f"{k} {v}" for k, v in sorted(c["db_connections_by_name_max"].items()))
                    lines.append(
                        f"{head} {c['orders']} | {f(c['events_per_s'])} | {f(c['ideal_per_s'])} | "
                        f"{f(c['efficiency'])} | {f(c.get('steady_events_per_s'))}, {f(c.get('steady_efficiency'))} | "
                        f"{f(c['inflight_p50_ms'])} / {f(c['inflight_p99_ms'])} | "
                        f"{f(cpu['total'])} = {f(cpu['process'])} + {f(cpu['postgres'])} + {f(cpu['simulator'])} | "
                        f"{f(c['rss_peak_mb'], ' MB')} | {f(c['threads_max'])} | {conns or '–'} | "
                        f"{f(c['cpu_others_pct'], '%')} {f(c['load1'])} |")
    if any(c.get("paced") for by_conc in r["slow_partners"].values()
           for cells in by_conc.values() for c in cells.values()):
        lines += [
            "",
            f"### Paced load: commit → CONFIRMED ({s.get('slow_paced_load')} × the ideal rate for "
            f"{s.get('slow_paced_seconds')} s into an idle system)",
            "",
            "| latency ms | concurrency | system | orders | offered/s | fed/s | p50 ms | p95 ms | p99 ms | max ms | threads | DB connections | load1 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for lat, by_conc in r["slow_partners"].items():
            for conc, cells in by_conc.items():
                for system, c in cells.items():
                    p = c.get("paced")
                    if not p:
                        continue
                    lines.append(
                        f"| {lat.removeprefix('latency_').removesuffix('ms')} | {conc} | {names[system]} | "
                        f"{p['orders']} | {f(p['offered_per_s'])} | {f(p['fed_per_s'])} | "
                        f"{f(p['commit_to_confirmed_p50_ms'])} | {f(p['commit_to_confirmed_p95_ms'])} | "
                        f"{f(p['commit_to_confirmed_p99_ms'])} | {f(p['commit_to_confirmed_max_ms'])} | "
                        f"{f(p['threads_max'])} | {f(p['db_connections_max'])} | {f(p['load1'])} |")
    return lines


def check(path):
    data = json.load(open(path))
    missing = [k for k in REQUIRED_KEYS if k not in data]
    def has_number(v):
        if isinstance(v, dict):
            return any(has_number(x) for x in v.values())
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    settings = data.get("settings", {})
    ran = (settings.get("measures") or " ".join(DEFAULT_MEASURES)).split()
    not_numbers = [k for m in SMOKE_NUMBERS if m in ran for k in SMOKE_NUMBERS[m]
                   if settings.get(SMOKE_UNLESS.get(k), 1) != 0 and not has_number(data.get(k))]
    if missing or not_numbers:
        sys.exit(f"bench.py check: missing keys {missing}, not numbers {not_numbers} in {path}")
    print(f"bench.py check: {path} has every required key")


def parse_value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def emit(path, *pairs):
    record = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if value.startswith("@") and key == "x":
            record.update(json.load(open(value[1:])))
        elif value.startswith("@"):
            record[key] = json.load(open(value[1:]))
        else:
            record[key] = parse_value(value)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def meta(path, *pairs):
    record = {"kind": "meta", "versions": {}, "settings": {}}
    for pair in pairs:
        key, _, value = pair.partition("=")
        group, dot, name = key.partition(".")
        if dot and group in ("versions", "settings"):
            record[group][name] = parse_value(value) if group == "settings" else value
        else:
            record[key] = parse_value(value)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def field(path, key):
    print(json.loads(open(path).read())[key])


# The system calls a thread waits in: libpq waits for PostgreSQL's answers in poll(), the call
# driver for the partners' in epoll (curl's own polls look at a socket without waiting).
WAITS = {"7": "database", "271": "database", "232": "calls", "281": "calls", "441": "calls",
         "202": "futex"}


def thread_states(pid):
    if platform.machine() != "x86_64":  # WAITS holds x86-64's system call numbers
        sys.exit(f"bench.py thread-states: x86-64 only (this is {platform.machine()})")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    counts, actors, listed = {}, [], 0.0

    def read(tid, name):
        with open(f"/proc/{pid}/task/{tid}/{name}") as f:
            return f.read()

    while not stopping:
        if time.monotonic() - listed > 1:  # the actors' threads, looked up once a second
            listed = time.monotonic()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                break
            actors = []
            for tid in tids:
                try:
                    if "(caf.actor)" in read(tid, "stat"):
                        actors.append(tid)
                except OSError:
                    pass  # the thread ended
        for tid in actors:
            try:
                stat, call = read(tid, "stat"), read(tid, "syscall").split()[0]
            except (OSError, IndexError):
                continue
            state = "running" if stat[stat.rindex(")") + 2] == "R" else WAITS.get(call, "other")
            c = counts.setdefault(tid, {})
            c[state] = c.get(state, 0) + 1
        time.sleep(0.01)
    if not counts:
        print(f"bench.py thread-states: no thread of {pid} sampled (none named caf.actor, or "
              "/proc/<pid>/task/<tid>/syscall not readable)", file=sys.stderr)
    kinds = ("running", "database", "calls", "futex", "other")
    for tid, c in sorted(counts.items(), key=lambda kv: -kv[1].get("running", 0)):
        n = sum(c.values())
        if c.get("running", 0) < 0.05 * n:
            continue  # idle, or a listener waiting on its connection
        print(f"thread {tid}: " + ", ".join(f"{k} {c.get(k, 0) / n:.2f}" for k in kinds) +
              f" ({n} samples)")


def pick(path, attempts_path):
    record = json.loads(open(path).read())
    shares = [float(l) for l in open(attempts_path) if l.strip()]
    record["attempts"] = len(shares)
    record["others_pct_attempts"] = shares
    print(json.dumps(record))


if __name__ == "__main__":
    commands = {"ports": ports, "sim-config": sim_config, "pgbench-tps": pgbench_tps,
                "latency-mean": lambda spec: print(latency_mean(spec)), "samples": samples,
                "paced": paced, "field": field, "pick": pick,
                "wake": wake, "report": report, "check": check, "emit": emit, "meta": meta,
                "sample": sample, "burst": burst,
                "thread-states": thread_states}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
