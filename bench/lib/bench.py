#!/usr/bin/env python3
"""Small helpers of bench/run.sh: free ports, simulator knobs, result parsing, statistics and the
report. Standard library only.

  bench.py ports N                    N free TCP ports on 127.0.0.1, one per line
  bench.py sim-config LATENCY_MS      PUT /api/simulator/config body: no failures, fixed latency
  bench.py pgbench-tps FILE           the tps figure of a pgbench output
  bench.py wake LEDGER COMMITS        commit -> first simulator request, as one JSON object
  bench.py report RAW JSON MD         aggregate raw.jsonl into latest.json and the Markdown table
  bench.py check JSON                 exit 0 only when JSON has every required key
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
    "peer_wake_p99_ms", "flat_cost_ratio", "rss_idle_mb", "rss_drain_mb", "burst_orders",
    "burst_intake_orders_per_s", "burst_drain_events_per_s", "burst_preloaded_drain_events_per_s",
    "burst_drain_ratio", "burst_claim_p50_ms", "burst_claim_p99_ms", "burst_claim_p99_max_ms",
    "burst_series", "versions", "settings",
]
# The smoke test also insists that these hold numbers (the rest may be null when skipped).
SMOKE_NUMBERS = ["intake_orders_per_s", "intake_pgbench_tps", "intake_ratio", "rss_idle_mb",
                 "rss_drain_mb", "burst_intake_orders_per_s", "burst_preloaded_drain_events_per_s",
                 "burst_claim_p99_ms"]


def ports(n):
    socks = []
    for _ in range(int(n)):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    for s in socks:
        print(s.getsockname()[1])
        s.close()


def sim_config(latency_ms):
    latency = int(latency_ms)
    body = {"services": {k: {"failureRate": 0, "latencyMs": latency, "lateRate": 0, "failNext": 0}
                         for k in KNOBS}}
    print(json.dumps(body))


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
    }


def markdown(r):
    f = lambda v, unit="": "–" if v is None else f"{v:g}{unit}"
    s = r["settings"]
    v = r["versions"]
    lines = [
        f"# outboxd benchmark, {r['date']} ({r['mode']})",
        "",
        f"Median of {s.get('runs')} run(s) per figure. outboxd {v.get('outboxd', '?')} (commit "
        f"{v.get('commit', '?')}), PostgreSQL {v.get('postgresql', '?')}, graphile-worker "
        f"{v.get('graphile_worker', '–')} on node {v.get('node', '–')}, {v.get('cpus', '?')} CPUs "
        f"({v.get('cpu_model', '?')}), kernel {v.get('kernel', '?')}.",
        f"Durable PostgreSQL defaults (fsync={s.get('fsync')}, synchronous_commit="
        f"{s.get('synchronous_commit')}); all simulator failure rates 0.",
        "",
        "## Summary against the targets",
        "",
        "| target | result |",
        "|---|---|",
    ]
    for name, ok in r["targets"].items():
        lines.append(f"| {name} | {'not measured' if ok is None else ('met' if ok else 'NOT met')} |")
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
    fc = r["flat_cost"] or {}
    lines += [
        "",
        f"## Wake-up ({s.get('wake_orders')} orders at {s.get('wake_rate')}/s into an idle system, "
        f"concurrency {s.get('wake_concurrency')})",
        "",
        "| system | p50 | p95 | p99 |",
        "|---|---|---|---|",
        f"| outboxd | {f(r['wake_p50_ms'], ' ms')} | {f(r['wake_p95_ms'], ' ms')} | {f(r['wake_p99_ms'], ' ms')} |",
        f"| graphile-worker | {f(r['peer_wake_p50_ms'], ' ms')} | {f(r['peer_wake_p95_ms'], ' ms')} | {f(r['peer_wake_p99_ms'], ' ms')} |",
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
        "",
    ]
    lines += burst_markdown(r)
    lines += [
        "Settings: `" + json.dumps(s, sort_keys=True) + "`",
        "",
    ]
    return "\n".join(lines)


def burst_markdown(r):
    f = lambda v, unit="": "–" if v is None else f"{v:g}{unit}"
    if r["burst_orders"] is None:
        return []
    d, q = r["burst_drain_events_per_s"], r["burst_drain_ratio"]
    lines = [
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
        "",
    ]
    if r["burst_series"]:
        lines += [
            "Per second (the run with the median overall drain; t from the first request):",
            "",
            "| t (s) | intake/s | drained/s | unfinished | claims | claim p50 | claim p99 |",
            "|---|---|---|---|---|---|---|",
        ]
        for x in r["burst_series"]:
            lines.append(f"| {x['t']:g} | {x['intake_per_s']:g} | {x['drained_per_s']:g} | "
                         f"{x['unfinished']} | {x['claims']} | {f(x['claim_p50_ms'], ' ms')} | "
                         f"{f(x['claim_p99_ms'], ' ms')} |")
        lines.append("")
    return lines


def check(path):
    data = json.load(open(path))
    missing = [k for k in REQUIRED_KEYS if k not in data]
    not_numbers = [k for k in SMOKE_NUMBERS if not isinstance(data.get(k), (int, float))]
    drains = data.get("drain_events_per_s") or {}
    if not any(isinstance(v, (int, float)) for by_conc in drains.values() for v in by_conc.values()):
        not_numbers.append("drain_events_per_s")
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


if __name__ == "__main__":
    commands = {"ports": ports, "sim-config": sim_config, "pgbench-tps": pgbench_tps,
                "wake": wake, "report": report, "check": check, "emit": emit, "meta": meta,
                "sample": sample, "burst": burst}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
