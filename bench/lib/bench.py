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
    "peer_wake_p99_ms", "flat_cost_ratio", "rss_idle_mb", "rss_drain_mb",
    "drain_cpu_ms_per_event", "peer_drain_cpu_ms_per_event", "drain_cpu_ratio_vs_peer",
    "simulator_check", "slow_events_per_s", "peer_slow_jobs_per_s", "slow_efficiency",
    "peer_slow_efficiency", "slow_confirm_p99_ms", "peer_slow_confirm_p99_ms", "slow_partners",
    "versions", "settings",
]
# Nested tables ({latency: {concurrency: ...}}) the smoke test wants at least one number in.
SMOKE_TABLES = ["drain_events_per_s", "drain_cpu_ms_per_event", "simulator_check",
                "slow_events_per_s", "slow_confirm_p99_ms"]
CPU_FIELDS = ["process", "postgres", "simulator", "total"]
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
                    "orders": recs[0]["events"], "events_per_s": rnd(rate),
                    "efficiency": rnd(ratio(rate, ideal_rate), 3),
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
    measures = (s.get("measures") or "intake memory drain flat wake").split()
    lines = [
        f"# outboxd benchmark, {r['date']} ({r['mode']}{'' if set(measures) >= {'intake', 'memory', 'drain', 'flat', 'wake'} else ': ' + ', '.join(measures)})",
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
    lines += slow_markdown(r, f)
    lines += [
        "",
        "Settings: `" + json.dumps(s, sort_keys=True) + "`",
        "",
    ]
    return "\n".join(lines)


def slow_markdown(r, f):
    s = r["settings"]
    lines = []
    if r["simulator_check"]:
        lines += [
            "",
            "## Slow partners",
            "",
            f"Both systems get {s.get('slow_connections')} database connections (outboxd "
            f"`outbox.connections`, graphile-worker's pool `max`); concurrency is outboxd's "
            f"`outbox.poolSize` and graphile-worker's `concurrency`. Ideal = concurrency / (4 calls × mean "
            f"latency). Backlog: {s.get('slow_seconds_at_ideal')} s at the ideal rate, at most "
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
            "| latency ms | concurrency | system | orders | events/s | ideal | efficiency | in flight p50 / p99 ms | CPU ms/event (process + PG + sim) | peak RSS | threads | DB connections | others, load1 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        names = {"outboxd": "outboxd", "peer": "graphile-worker"}
        for lat, by_conc in r["slow_partners"].items():
            for conc, cells in by_conc.items():
                for system, c in cells.items():
                    head = f"| {lat.removeprefix('latency_').removesuffix('ms')} | {conc} | {names[system]} |"
                    if c.get("refused"):
                        lines.append(f"{head} – | not possible: {c['refused']} | {f(c['ideal_per_s'])} | | | | | | | |")
                        continue
                    cpu = c["cpu_ms_per_event"]
                    conns = ", ".join(f"{k} {v}" for k, v in sorted(c["db_connections_by_name_max"].items()))
                    lines.append(
                        f"{head} {c['orders']} | {f(c['events_per_s'])} | {f(c['ideal_per_s'])} | "
                        f"{f(c['efficiency'])} | {f(c['inflight_p50_ms'])} / {f(c['inflight_p99_ms'])} | "
                        f"{f(cpu['total'])} = {f(cpu['process'])} + {f(cpu['postgres'])} + {f(cpu['simulator'])} | "
                        f"{f(c['rss_peak_mb'], ' MB')} | {f(c['threads_max'])} | {conns or '–'} | "
                        f"{f(c['cpu_others_pct'], '%')} {f(c['load1'])} |")
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
    not_numbers = [k for k in SMOKE_NUMBERS if not isinstance(data.get(k), (int, float))]
    def has_number(v):
        if isinstance(v, dict):
            return any(has_number(x) for x in v.values())
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    not_numbers += [k for k in SMOKE_TABLES if not has_number(data.get(k))]
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


def field(path, key):
    print(json.loads(open(path).read())[key])


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
                "wake": wake, "report": report, "check": check, "emit": emit, "meta": meta}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
