-- POST /v1/leases, each request on a resource no request has used before:
-- resource_id = <tag>-<thread>-<counter>. Args after `--`: KEY TAG [FIXED_RESOURCE_ID].
-- With FIXED_RESOURCE_ID every request acquires that one resource (re-acquire by its holder).
-- With the one arg `healthz`: GET /healthz instead (the HTTP stack alone), 200 expected.
local threads = {}
local counter = 0
-- `tid` and `bad` are globals: wrk's thread:set/get reach only globals.
local key, tag, fixed, healthz

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  bad = 0
  healthz = args[1] == "healthz"
  if healthz then return end
  key = args[1]
  tag = args[2] or "r"
  fixed = args[3]
  wrk.method = "POST"
  wrk.headers["content-type"] = "application/json"
  wrk.headers["authorization"] = "Bearer " .. key
end

function request()
  if healthz then return wrk.format("GET", "/healthz") end
  counter = counter + 1
  local rid = fixed or string.format("%s-%d-%d", tag, tid, counter)
  local body = string.format(
    '{"resource_type":"bench","resource_id":"%s","purpose":"bench acquire","ttl_seconds":600}',
    rid)
  return wrk.format(nil, "/v1/leases", nil, body)
end

function response(status, headers, body)
  if status ~= (healthz and 200 or 201) then bad = bad + 1 end
end

function done(summary, latency, requests)
  local wrong = 0
  for _, t in ipairs(threads) do wrong = wrong + (t:get("bad") or 0) end
  io.write(string.format(
    "RESULT requests=%d duration_us=%d errors=%d wrong_status=%d mean_us=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    wrong, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
