"""Slow clients for bench/slow_clients.sh: COUNT connections to HOST:PORT that each send the start
of a POST and then one header line every INTERVAL seconds, never finishing the request. A
connection the server cuts off is counted (and whether it answered 408 first) and reopened at
once, so COUNT stay open for as long as the script runs. On SIGTERM it writes its counts to STATS
as JSON and exits.

    python3 dribble.py HOST PORT COUNT INTERVAL STATS
"""
import asyncio
import json
import signal
import sys


async def one(host, port, interval, stats, stop):
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            stats["connect_errors"] += 1
            await asyncio.sleep(0.1)
            continue
        stats["opened"] += 1
        stats["open"] += 1
        try:
            writer.write(b"POST /api/orders HTTP/1.1\r\nHost: bench\r\n")
            await writer.drain()
            answer = b""
            while not stop.is_set():
                try:
                    answer = await asyncio.wait_for(reader.read(4096), timeout=interval)
                except asyncio.TimeoutError:
                    writer.write(b"X-Slow: a\r\n")
                    await writer.drain()
                    continue
                break  # the server answered or closed: the connection is over
            if answer.startswith(b"HTTP/1.1 408"):
                stats["cut_408"] += 1
            elif answer.startswith(b"HTTP/1.1 503"):
                stats["refused_503"] += 1
            elif not stop.is_set():
                stats["closed_other"] += 1
        except (ConnectionError, OSError):
            stats["closed_other"] += 1
        finally:
            stats["open"] -= 1
            writer.close()


async def main():
    host, port, count, interval, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4]), sys.argv[5]
    stats = {"target": count, "opened": 0, "open": 0, "cut_408": 0, "refused_503": 0,
             "closed_other": 0, "connect_errors": 0}
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    tasks = [asyncio.create_task(one(host, port, interval, stats, stop)) for _ in range(count)]
    # Report how many are open once a second (the script waits for all of them to be).
    while not stop.is_set():
        with open(out, "w") as f:
            json.dump(stats, f)
        try:
            await asyncio.wait_for(stop.wait(), timeout=1)
        except asyncio.TimeoutError:
            pass
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    with open(out, "w") as f:
        json.dump(stats, f)


asyncio.run(main())
