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
                                      they are; key=@PATH merges the JSON object in PATH)
  bench.py meta FILE key=value...     the same, for the run's description: "versions.x=..." and
                                      "settings.x=..." go into nested objects
"""
import json
import math
import re
import socket
import statistics
import sys

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
    "peer_wake_p99_ms", "flat_cost_ratio", "rss_idle_mb", "rss_drain_mb", "versions", "settings",
]
# The smoke test also insists that these hold numbers (the rest may be null when skipped).
SMOKE_NUMBERS = ["intake_orders_per_s", "intake_pgbench_tps", "intake_ratio", "rss_idle_mb",
                 "rss_drain_mb"]


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
        "versions": meta.get("versions", {}),
        "settings": meta.get("settings", {}),
    }
    result["targets"] = targets(result)
    result["runs"] = [r for r in rows if r["kind"] != "meta"]
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(md_path, "w") as f:
        f.write(markdown(result))


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
        "Settings: `" + json.dumps(s, sort_keys=True) + "`",
        "",
    ]
    return "\n".join(lines)


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
        if value.startswith("@"):
            record.update(json.load(open(value[1:])))
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
                "wake": wake, "report": report, "check": check, "emit": emit, "meta": meta}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
