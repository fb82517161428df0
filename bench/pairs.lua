-- Acquire+release pairs: POST /v1/leases on a fresh resource, read lease_id from the 201, then
-- DELETE /v1/leases/{lease_id}. The connections of one wrk thread share this Lua state, so
-- released ids wait in a queue: a connection's next request releases a pending lease if there is
-- one, else acquires. Args after `--`: KEY TAG.
local threads = {}
local counter = 0
local pending = {}
local head, tail = 1, 0
-- `tid`, `bad`, `acquires` and `releases` are globals: wrk's thread:set/get reach only globals.

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  key = args[1]
  tag = args[2] or "p"
  bad = 0
  acquires = 0
  releases = 0
end

local headers_post = {}
local headers_delete = {}

function request()
  headers_post["content-type"] = "application/json"
  headers_post["authorization"] = "Bearer " .. key
  headers_delete["authorization"] = "Bearer " .. key
  if head <= tail then
    local lease_id = pending[head]
    pending[head] = nil
    head = head + 1
    return wrk.format("DELETE", "/v1/leases/" .. lease_id, headers_delete, nil)
  end
  counter = counter + 1
  local body = string.format(
    '{"resource_type":"bench","resource_id":"%s-%d-%d","purpose":"bench pair","ttl_seconds":600}',
    tag, tid, counter)
  return wrk.format("POST", "/v1/leases", headers_post, body)
end

function response(status, headers, body)
  if status == 201 then
    local lease_id = string.match(body, '"lease_id"%s*:%s*"([%w_]+)"')
    if lease_id then
      acquires = acquires + 1
      tail = tail + 1
      pending[tail] = lease_id
    else
      bad = bad + 1
    end
  elseif status == 200 then
    releases = releases + 1
  else
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local wrong, acq, rel = 0, 0, 0
  for _, t in ipairs(threads) do
    wrong = wrong + (t:get("bad") or 0)
    acq = acq + (t:get("acquires") or 0)
    rel = rel + (t:get("releases") or 0)
  end
  io.write(string.format(
    "RESULT requests=%d duration_us=%d errors=%d wrong_status=%d acquires=%d releases=%d mean_us=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    wrong, acq, rel, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
