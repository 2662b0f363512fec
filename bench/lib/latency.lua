-- wrk script of the slow-clients measure: GET (the URL's path) on keep-alive connections; the
-- summary is printed as one JSON line (after wrk's own text).
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_s":%.6f,"per_s":%.3f,"p50_ms":%.3f,"p99_ms":%.3f,' ..
    '"max_ms":%.3f,"non2xx":%d,"socket_errors":%d}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    e.status, e.connect + e.read + e.write + e.timeout))
end
