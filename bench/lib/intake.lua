-- wrk script of the intake measure: every request creates one order through the public API.
-- The summary is printed as one JSON line (after wrk's own text) for bench/run.sh to pick up.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"customerId":"C-1","totalAmount":99.99,"shippingType":"domestic"}'

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_s":%.6f,"orders_per_s":%.3f,"p50_ms":%.3f,"p99_ms":%.3f,' ..
    '"non2xx":%d,"socket_errors":%d}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.status, e.connect + e.read + e.write + e.timeout))
end
