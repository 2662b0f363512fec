-- wrk script of the simulator check (bench/run.sh, slow partners): the simulator alone, every
-- request an inventory reservation as outboxd sends it (JSON body, X-Aggregate-Id, a fresh
-- Idempotency-Key), so each one is validated, claims a key, sleeps the knob's latency, applies a
-- ledger entry and renders its answer. The summary is printed as one JSON line.
-- Each wrk thread numbers its requests from its own id (the global `thread_id` that setup() gives
-- it; a local of that name would shadow it and make the threads send the same keys at once, so
-- that one request in a hundred waited out another's latency as the key's replay).
local counter = 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

function request()
  counter = counter + 1
  local id = thread_id * 100000000 + counter
  local body = string.format(
    '{"orderId":%d,"items":[],"shippingType":"domestic","totalAmount":99.99}', id)
  local headers = {
    ["Host"] = wrk.headers["Host"], -- set by wrk before the first request; HTTP/1.1 requires it
    ["Content-Type"] = "application/json",
    ["X-Aggregate-Id"] = tostring(id),
    ["Idempotency-Key"] = "simcheck:" .. id,
  }
  return wrk.format("POST", "/api/inventory/reserve", headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_s":%.6f,"requests_per_s":%.3f,"p50_ms":%.3f,"p99_ms":%.3f,' ..
    '"mean_ms":%.3f,"non2xx":%d,"socket_errors":%d}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.mean / 1000,
    e.status, e.connect + e.read + e.write + e.timeout))
end
