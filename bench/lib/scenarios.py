#!/usr/bin/env python3
"""Helpers of bench/outage.sh and bench/hostile_rss.sh: a paced order poster, an RSS sampler,
the --set options that point a destination elsewhere, and the two reports. Standard library only.

  scenarios.py route-sets CONFIG DEST FROM TO   key=value lines that point every URL of destination
                                               DEST (its url or each route's, and their reverts)
                                               that starts with FROM to TO instead; CONFIG is the
                                               JSON `outboxd check-config` prints
  scenarios.py post URL RATE CLIENTS OUT       POST /api/orders at RATE/s (CLIENTS keep-alive
                                               connections share one schedule) until SIGTERM;
                                               then writes a JSON summary to OUT
  scenarios.py rss PID INTERVAL_S OUT          samples VmRSS and VmHWM of PID until SIGTERM or
                                               the process ends; then writes a JSON summary to OUT
  scenarios.py outage-report RAW JSON MD       bench/outage.sh's report, the variants side by side
  scenarios.py outage-line FILE             one variant's figures in one line, for the log
  scenarios.py hostile-report RAW JSON MD      bench/hostile_rss.sh's report
  scenarios.py check JSON KEY...               exit 0 only when JSON has every KEY (a.b = nested)
"""
import json
import os
import re
import signal
import sys
import threading
import time
from urllib.parse import urlsplit

ORDER = json.dumps({"customerId": "C-1", "totalAmount": 99.99, "shippingType": "domestic"})


def stop_on_term():
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    return stop


def write_json(path, value):
    """Replaces PATH atomically: a reader never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


# --- route-sets ----------------------------------------------------------------------------------

def route_sets(config_path, dest, old, new):
    config = json.load(open(config_path))
    d = config["http"]["routes"][dest]
    out = []

    def point(key, url):
        if isinstance(url, str) and url.startswith(old):
            out.append(f"{key}={new}{url[len(old):]}")

    base = f"http.routes.{dest}"
    point(f"{base}.url", d.get("url"))
    if isinstance(d.get("revert"), dict):
        point(f"{base}.revert.url", d["revert"].get("url"))
    for i, r in enumerate(d.get("routes") or []):
        point(f"{base}.routes.{i}.url", r.get("url"))
        if isinstance(r.get("revert"), dict):
            point(f"{base}.routes.{i}.revert.url", r["revert"].get("url"))
    if not out:
        sys.exit(f"scenarios.py route-sets: no URL of {dest} starts with {old}")
    print("\n".join(out))


# --- post ----------------------------------------------------------------------------------------

def post(url, rate, clients, out_path):
    stop = stop_on_term()
    import http.client  # after the handlers: a SIGTERM during start-up still ends in a summary
    rate, clients = float(rate), int(clients)
    target = urlsplit(url)
    lock = threading.Lock()
    state = {"next": 0, "created": 0, "refused": 0, "errors": 0, "late": 0, "max_ms": 0.0}
    start = time.monotonic()
    started_at = time.time()
    write_json(out_path, {"orders_created": 0, "running": True, "started_at": started_at})

    def client():
        conn = None
        while not stop.is_set():
            with lock:
                slot = state["next"]
                state["next"] += 1
            due = start + slot / rate
            if stop.wait(max(0.0, due - time.monotonic())):
                return
            t = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                conn.request("POST", "/api/orders", ORDER, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                key = "created" if resp.status == 201 else "refused"
            except (OSError, http.client.HTTPException):
                key = "errors"
                if conn is not None:
                    conn.close()
                conn = None
            ms = (time.monotonic() - t) * 1000
            with lock:
                state[key] += 1
                state["max_ms"] = max(state["max_ms"], ms)
                if t - due > 1.0:
                    state["late"] += 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    while not stop.wait(0.2):
        pass
    for t in threads:
        t.join(35)
    seconds = time.monotonic() - start
    summary = {"orders_created": state["created"], "non_201": state["refused"],
               "errors": state["errors"], "late_over_1s": state["late"],
               "max_post_ms": round(state["max_ms"], 1), "seconds": round(seconds, 3),
               "rate_asked": rate, "rate_made": round(state["created"] / seconds, 2) if seconds else None,
               "started_at": started_at}
    write_json(out_path, summary)


# --- rss -----------------------------------------------------------------------------------------

def read_status(pid):
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) / 1024  # kB -> MB
    return values


def rss(pid, interval, out_path):
    """The summary is rewritten after every sample, so it is there whenever the sampler ends."""
    stop = stop_on_term()
    samples = []
    hwm = None
    r = lambda x: None if x is None else round(x, 1)

    def summary():
        return {"samples": len(samples), "interval_s": float(interval),
                "rss_peak_sampled_mb": r(max(samples) if samples else None),
                "rss_first_mb": r(samples[0] if samples else None),
                "rss_last_mb": r(samples[-1] if samples else None), "vm_hwm_mb": r(hwm)}

    while True:
        try:
            v = read_status(pid)
        except OSError:
            break
        samples.append(v.get("VmRSS", 0.0))
        hwm = v.get("VmHWM", hwm)
        write_json(out_path, summary())
        if stop.wait(float(interval)):
            break
    try:
        hwm = read_status(pid).get("VmHWM", hwm)
    except OSError:
        pass
    write_json(out_path, summary())


# --- reports -------------------------------------------------------------------------------------

def fmt(v, unit=""):
    if v is None:
        return "–"
    if isinstance(v, float):
        v = round(v, 1)
    return f"{v}{unit}"


def load(raw_path):
    rows = [json.loads(l) for l in open(raw_path) if l.strip()]
    meta = next((r for r in rows if r.get("kind") == "meta"), {})
    return meta, [r for r in rows if r.get("kind") != "meta"]


def versions_line(meta):
    v = meta.get("versions", {})
    return (f"outboxd {v.get('outboxd', '?')} (commit {v.get('commit', '?')}), PostgreSQL "
            f"{v.get('postgresql', '?')}, {v.get('cpus', '?')} CPUs ({v.get('cpu_model', '?')}), "
            f"kernel {v.get('kernel', '?')}" + (f", load average {v['load_average']} at the start"
                                                  if v.get("load_average") else "") + ".")


def outage_report(raw_path, json_path, md_path):
    meta, rows = load(raw_path)
    variants = {}
    for r in rows:
        if r.get("kind") == "outage":
            variants[r["variant"]] = {k: v for k, v in r.items() if k not in ("kind", "variant")}
    result = {"scenario": "outage", "mode": meta.get("mode"), "date": meta.get("date"),
              "variants": variants, "versions": meta.get("versions", {}),
              "settings": meta.get("settings", {})}
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    s = result["settings"]
    names = list(variants)
    lines = [
        f"# outboxd: billing down for {s.get('refuse_s', 0) + s.get('hang_s', 0)} s, "
        f"{result['date']} ({result['mode']})",
        "",
        versions_line(meta),
        f"Orders at {s.get('rate')}/s through POST /api/orders for the whole run; billing (every "
        f"route and revert) behind a proxy: {s.get('normal_s')} s normal, {s.get('refuse_s')} s "
        f"connection refused, {s.get('hang_s')} s accepting and never answering, then answering "
        f"again. Per-call timeout 5 s (shipped), simulator failure rates 0.",
        "",
    ]
    for n in names:
        v = variants[n]
        lines.append(f"- **{n}**: " + (f"skipped: {v['skipped']}" if "skipped" in v else
                                       f"`{' '.join(v.get('sets') or []) or '(no extra --set)'}`"))
    ran = [n for n in names if "skipped" not in variants[n]]
    if ran:
        g = lambda n, *path: dig(variants[n], *path)
        table = [
            ("orders posted", lambda n: g(n, "poster", "orders_created")),
            ("orders FAILED or ATTENTION (target 0)", lambda n: g(n, "orders", "failed_or_attention")),
            ("… FAILED / ATTENTION", lambda n: f"{fmt(g(n, 'orders', 'by_status', 'FAILED') or 0)} / {fmt(g(n, 'orders', 'by_status', 'ATTENTION') or 0)}"),
            ("orders not finished at the end", lambda n: g(n, "orders", "unfinished")),
            ("events dead-lettered", lambda n: g(n, "events", "dead")),
            ("billing attempt rows, outage window", lambda n: g(n, "billing_outage", "rows")),
            ("… while refused / while hanging", lambda n: f"{fmt(g(n, 'billing_outage', 'rows_refused'))} / {fmt(g(n, 'billing_outage', 'rows_hanging'))}"),
            ("proxy: connections / requests while hanging", lambda n: f"{fmt(g(n, 'proxy', 'hang', 'connections'))} / {fmt(g(n, 'proxy', 'hang', 'requests'))}"),
            ("worker time waiting on billing, outage window", lambda n: fmt(g(n, "billing_outage", "wait_s"), " s")),
            ("recovery → backlog drained", lambda n: fmt(g(n, "drain_after_recovery_s"), " s")),
            ("orders after recovery", lambda n: g(n, "after_recovery", "orders")),
            ("… commit → CONFIRMED p50", lambda n: fmt(g(n, "after_recovery", "p50_ms"), " ms")),
            ("… commit → CONFIRMED p99", lambda n: fmt(g(n, "after_recovery", "p99_ms"), " ms")),
            ("… commit → CONFIRMED max", lambda n: fmt(g(n, "after_recovery", "max_ms"), " ms")),
            ("orders during the outage: commit → CONFIRMED p99", lambda n: fmt(g(n, "outage_orders", "p99_ms"), " ms")),
            ("orders before the outage: commit → CONFIRMED p99", lambda n: fmt(g(n, "before_outage", "p99_ms"), " ms")),
        ]
        lines += ["", "| measure | " + " | ".join(ran) + " |", "|---" * (len(ran) + 1) + "|"]
        for label, get in table:
            lines.append(f"| {label} | " + " | ".join(fmt(get(n)) for n in ran) + " |")
        lines += ["", "Commit → CONFIRMED p99 of the orders created in each 5 s after the recovery:", ""]
        for n in ran:
            b = g(n, "after_recovery_by_5s") or []
            lines.append(f"- {n}: " + (", ".join(f"{x['from_s']}-{x['from_s'] + 5} s {fmt(x['p99_ms'])} ms"
                                                  for x in b[:8]) or "none"))
        lines += ["", "Billing attempts in the outage window by outcome and error:", ""]
        for n in ran:
            errs = error_groups(g(n, "billing_outage", "by_error") or [])
            lines.append(f"- {n}: " + ("; ".join(f"{c}× {o} `{e}`" for (o, e), c in errs) or "none"))
    lines += ["", "Settings: `" + json.dumps(s, sort_keys=True) + "`", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(lines))


def error_groups(rows):
    """Attempt rows grouped by outcome and error text with every number as N (ports, ms)."""
    groups = {}
    for e in rows:
        key = (e["outcome"], re.sub(r"[0-9]+", "N", e["error"]).strip() or "(no error)")
        groups[key] = groups.get(key, 0) + e["n"]
    return sorted(groups.items(), key=lambda kv: -kv[1])


def outage_line(path):
    m = json.load(open(path))
    print(f"FAILED or ATTENTION {dig(m, 'orders', 'failed_or_attention')}, billing attempts in the "
          f"outage {dig(m, 'billing_outage', 'rows')} ({dig(m, 'billing_outage', 'wait_s')} s waiting), "
          f"drained {m.get('drain_after_recovery_s')} s after recovery, p99 after recovery "
          f"{dig(m, 'after_recovery', 'p99_ms')} ms")


def hostile_report(raw_path, json_path, md_path):
    meta, rows = load(raw_path)
    runs = {r["name"]: {k: v for k, v in r.items() if k not in ("kind", "name")}
            for r in rows if r.get("kind") == "hostile"}
    for v in runs.values():
        # the kernel's high-water mark can miss a peak that was given back without an unmap, and
        # samples can miss a short one: the peak is the higher of the two
        seen = [x for x in (dig(v, "rss", "rss_peak_sampled_mb"), dig(v, "rss", "vm_hwm_mb")) if x is not None]
        v["rss_peak_mb"] = max(seen) if seen else None
    peak = [v["rss_peak_mb"] for n, v in runs.items() if n != "baseline" and v["rss_peak_mb"] is not None]
    result = {"scenario": "hostile-rss", "mode": meta.get("mode"), "date": meta.get("date"),
              "runs": runs, "rss_peak_hostile_mb": max(peak) if peak else None,
              "rss_peak_baseline_mb": dig(runs.get("baseline", {}), "rss_peak_mb"),
              "versions": meta.get("versions", {}), "settings": meta.get("settings", {})}
    result["target_rss_le_100mb"] = None if not peak else max(peak) <= 100
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    s = result["settings"]
    lines = [
        f"# outboxd: memory under gigabyte answers, {result['date']} ({result['mode']})",
        "",
        versions_line(meta),
        f"outbox.poolSize {s.get('pool')}, maxResponseBytes default; {s.get('orders')} orders made "
        f"through the API with processing off, then drained for up to {s.get('seconds')} s with every "
        f"route pointed at the server. RSS sampled every {s.get('interval_s')} s from /proc.",
        "",
        "| answer | calls made | most at once | truncated rows / attempt rows | largest stored body | "
        "peak RSS sampled | VmHWM | orders done |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in runs.items():
        lines.append(
            f"| {name} | {fmt(dig(v, 'server', 'requests'))} | {fmt(dig(v, 'server', 'max_in_flight'))} | "
            f"{fmt(dig(v, 'db', 'truncated'))} / {fmt(dig(v, 'db', 'attempts'))} | "
            f"{fmt(dig(v, 'db', 'largest_body_bytes'), ' B')} | {fmt(dig(v, 'rss', 'rss_peak_sampled_mb'), ' MB')} | "
            f"{fmt(dig(v, 'rss', 'vm_hwm_mb'), ' MB')} | {fmt(dig(v, 'db', 'orders_done'))} |")
    ok = result["target_rss_le_100mb"]
    lines += ["", f"Peak RSS under hostile answers {fmt(result['rss_peak_hostile_mb'], ' MB')} "
              f"(target ≤ 100 MB: {'not measured' if ok is None else ('met' if ok else 'NOT met')}); "
              f"a normal drain {fmt(result['rss_peak_baseline_mb'], ' MB')}.",
              "", "Settings: `" + json.dumps(s, sort_keys=True) + "`", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(lines))


def slow_report(raw_path, refused_path, json_path, md_path):
    meta, rows = load(raw_path)
    phases = {"unloaded": [], "slow": []}
    for r in rows:
        if r.get("kind") == "phase":
            phases[r["phase"]].append(r)
    dribbles = [r for r in rows if r.get("kind") == "dribble"]

    def median(values):
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    summary = {}
    for phase, runs in phases.items():
        summary[phase] = {
            "health_requests": sum(dig(r, "health", "requests") or 0 for r in runs),
            "health_p50_ms": median(dig(r, "health", "p50_ms") for r in runs),
            "health_p99_ms": median(dig(r, "health", "p99_ms") for r in runs),
            "health_max_ms": max((dig(r, "health", "max_ms") for r in runs
                                  if dig(r, "health", "max_ms") is not None), default=None),
            "health_errors": sum((dig(r, "health", "non2xx") or 0) + (dig(r, "health", "socket_errors") or 0)
                                 for r in runs),
            "intake_per_s": median(dig(r, "intake", "orders_per_s") for r in runs),
            "intake_errors": sum((dig(r, "intake", "non2xx") or 0) + (dig(r, "intake", "socket_errors") or 0)
                                 for r in runs),
        }
    u, sl = summary["unloaded"], summary["slow"]
    ratio = lambda a, b: round(a / b, 2) if a and b else None
    result = {"scenario": "slow-clients", "mode": meta.get("mode"), "date": meta.get("date"),
              "versions": meta.get("versions", {}), "settings": meta.get("settings", {}),
              "phases": summary, "rounds": {k: v for k, v in phases.items()},
              "dribblers": dribbles,
              "refused_metric": [l.strip() for l in open(refused_path) if l.strip()],
              "health_p99_ratio": ratio(sl["health_p99_ms"], u["health_p99_ms"]),
              "intake_ratio": ratio(u["intake_per_s"], sl["intake_per_s"])}
    if not sl["health_requests"] or not sl["intake_per_s"]:
        result["target_within_2x"] = False  # nothing answered at all while the slow clients were on
    elif None in (result["health_p99_ratio"], result["intake_ratio"]):
        result["target_within_2x"] = None
    else:
        result["target_within_2x"] = result["health_p99_ratio"] <= 2 and result["intake_ratio"] <= 2
    with open(json_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    s = result["settings"]
    cut = sum(d.get("cut_408", 0) for d in dribbles)
    refused = sum(d.get("refused_503", 0) for d in dribbles)
    opened = sum(d.get("opened", 0) for d in dribbles)
    ok = result["target_within_2x"]
    lines = [
        f"# outboxd: availability under {s.get('count')} slow connections, {result['date']} ({result['mode']})",
        "",
        versions_line(meta),
        f"One outboxd (processing off) on its defaults; per phase {s.get('seconds')} s of GET /healthz "
        f"{s.get('probe_rate')} times a second on one connection and, at the same time, wrk's POST /api/orders "
        f"as fast as {s.get('intake_clients')} connections go; phases alternate, "
        f"{s.get('rounds')} rounds each (medians). The slow connections each send a request line and then one "
        "header line every 2 s; one cut off is reopened at once.",
        "",
        "| phase | /healthz answered | p50 | p99 | max | intake orders/s | errors (health / intake) |",
        "|---|---|---|---|---|---|---|",
    ]
    for phase, v in summary.items():
        lines.append(f"| {'alone' if phase == 'unloaded' else str(s.get('count')) + ' slow connections open'} | "
                     f"{v['health_requests']} | {fmt(v['health_p50_ms'], ' ms')} | {fmt(v['health_p99_ms'], ' ms')} | "
                     f"{fmt(v['health_max_ms'], ' ms')} | {fmt(v['intake_per_s'])} | "
                     f"{v['health_errors']} / {v['intake_errors']} |")
    lines += ["",
              f"Loaded / alone: /healthz p99 ×{fmt(result['health_p99_ratio'])}, intake ÷{fmt(result['intake_ratio'])} "
              f"(target within 2×: {'not measured' if ok is None else ('met' if ok else 'NOT met')}).",
              f"Slow connections opened {opened}, cut off with 408 (server.requestTimeout) {cut}, refused with 503 {refused}.",
              "", "`/metrics` afterwards: " + (", ".join(f"`{l}`" for l in result["refused_metric"]) or "nothing refused"),
              "", "Settings: `" + json.dumps(s, sort_keys=True) + "`", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(lines))


def dig(d, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def check(path, *keys):
    data = json.load(open(path))
    missing = [k for k in keys if dig(data, *k.split(".")) is None]
    if missing:
        sys.exit(f"scenarios.py check: {path} lacks {missing}")
    print(f"scenarios.py check: {path} has {len(keys)} required values")


if __name__ == "__main__":
    commands = {"route-sets": route_sets, "post": post, "rss": rss, "outage-report": outage_report,
                "outage-line": outage_line,
                "hostile-report": hostile_report, "slow-report": slow_report, "check": check}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
