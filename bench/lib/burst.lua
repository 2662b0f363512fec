-- wrk script of the burst measure: BURST_ORDERS orders through POST /api/orders as fast as the
-- connections go (run it with one thread: wrk -t 1 -c 8 -d <limit>). Once the last order is out,
-- connections that are free ask GET /healthz until every order is answered; then it prints one
-- JSON line (orders sent, answered, and answered other than 201) and ends wrk. Should the limit
-- pass first, wrk ends without that line.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"customerId":"C-1","totalAmount":99.99,"shippingType":"domestic"}'

local total = tonumber(os.getenv("BURST_ORDERS") or "")
assert(total, "burst.lua: BURST_ORDERS is not set")
local order, filler -- made in init(), once wrk has set the Host header HTTP/1.1 requires
local posted, answered, refused = 0, 0, 0

function init(args)
  order = wrk.format()
  filler = wrk.format("GET", "/healthz", { Host = wrk.headers["Host"] }, nil)
end

-- wrk calls request() once before the run to check what it returns, and never sends that one
local checked = false

function request()
  if not checked then
    checked = true
    return order
  end
  if posted < total then
    posted = posted + 1
    return order
  end
  return filler
end

function response(status)
  if status == 200 then return end -- a filler
  answered = answered + 1
  if status ~= 201 then refused = refused + 1 end
  if answered >= total then
    -- wrk itself would wait for its -d duration to pass: the summary, and done
    io.write(string.format('{"posted":%d,"answered":%d,"refused":%d}\n', posted, answered, refused))
    io.flush()
    os.exit(0)
  end
end
