-- GET /healthz over and over (the HTTP stack alone: no key, no database). No args.
-- Prints the same RESULT line as acquire.lua; any status but 200 counts as wrong.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  bad = 0
end

function request()
  return wrk.format("GET", "/healthz")
end

function response(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
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
