-- etcd 3.4 as the peer of bench/acquire.lua, over its gRPC-gateway JSON API (/v3/...).
-- One acquire = two HTTP requests: POST /v3/lease/grant {"TTL":600}, then POST /v3/kv/txn that
-- puts a key no request used before (<tag>/<thread>/<counter>; keys and values are base64 in
-- JSON) only if its create_revision is 0, attached to that lease. Args after `--`: TAG [timed].
--
-- wrk keeps one Lua state per thread, shared by that thread's connections, and response() does
-- not say which connection answered: a granted lease ID waits in a queue and the thread's next
-- request (on whichever of its connections is ready first) is the txn that uses it. With one
-- connection per thread the two requests strictly alternate on that connection; with several,
-- a txn may go out on another connection than its grant (etcd does the same work either way).
--
-- Counts: acquires = txns answered "succeeded":true (a txn answered without it, or any non-200,
-- is counted as bad). Latency: wrk's own figures are per HTTP request, so half an acquire. With
-- `timed` (pass it only when each wrk thread has a single connection) the script also times
-- each acquire, from building the grant request to the txn's answer, with clock_gettime through
-- LuaJIT's ffi, and reports its percentiles as acq_*_us.
local ffi = require("ffi")
local bit = require("bit")

ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
  int clock_gettime(int clock, bench_timespec *ts);
]]
local now_ts = ffi.new("bench_timespec")
local function now_us()
  ffi.C.clock_gettime(1, now_ts) -- CLOCK_MONOTONIC
  return tonumber(now_ts.tv_sec) * 1000000 + tonumber(now_ts.tv_nsec) / 1000
end

local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function b64(text)
  local out = {}
  for i = 1, #text, 3 do
    local a, b, c = text:byte(i, i + 2)
    local n = bit.bor(bit.lshift(a, 16), bit.lshift(b or 0, 8), c or 0)
    for j = 0, 3 do
      if j <= 1 or (j == 2 and b) or (j == 3 and c) then
        local k = bit.band(bit.rshift(n, 18 - 6 * j), 63) + 1
        out[#out + 1] = alphabet:sub(k, k)
      else
        out[#out + 1] = "="
      end
    end
  end
  return table.concat(out)
end

local threads = {}
local counter = 0
local leases = {}
local head, tail = 1, 0
local value = b64("agent_bench")
local started
-- `tid`, `bad`, `acquires` and `samples` are globals: wrk's thread:set/get reach only globals.

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  tag = args[1] or "etcd"
  timed = args[2] == "timed"
  wrk.method = "POST"
  wrk.headers["content-type"] = "application/json"
  bad = 0
  acquires = 0
  samples = {}
end

function request()
  if head <= tail then
    local lease = leases[head]
    leases[head] = nil
    head = head + 1
    counter = counter + 1
    local key = b64(string.format("%s/%d/%d", tag, tid, counter))
    local body = string.format(
      '{"compare":[{"key":"%s","target":"CREATE","create_revision":"0"}],'
        .. '"success":[{"requestPut":{"key":"%s","value":"%s","lease":"%s"}}]}',
      key, key, value, lease)
    return wrk.format(nil, "/v3/kv/txn", nil, body)
  end
  if timed then started = now_us() end
  return wrk.format(nil, "/v3/lease/grant", nil, '{"TTL":600}')
end

function response(status, headers, body)
  if status ~= 200 then
    bad = bad + 1
    return
  end
  local lease = string.match(body, '"ID"%s*:%s*"(%d+)"')
  if lease then
    tail = tail + 1
    leases[tail] = lease
  elseif string.find(body, '"succeeded"%s*:%s*true') then
    acquires = acquires + 1
    if timed and started then
      samples[#samples + 1] = now_us() - started
      started = nil
    end
  else
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local wrong, acq, all = 0, 0, {}
  for _, t in ipairs(threads) do
    wrong = wrong + (t:get("bad") or 0)
    acq = acq + (t:get("acquires") or 0)
    for _, sample in ipairs(t:get("samples") or {}) do all[#all + 1] = sample end
  end
  local timing = ""
  if #all > 0 then
    table.sort(all)
    local sum = 0
    for _, sample in ipairs(all) do sum = sum + sample end
    local function pct(p) return all[math.max(1, math.ceil(#all * p / 100))] end
    timing = string.format(" acq_mean_us=%.1f acq_p50_us=%d acq_p99_us=%d",
      sum / #all, pct(50), pct(99))
  end
  io.write(string.format(
    "RESULT requests=%d duration_us=%d errors=%d wrong_status=%d acquires=%d mean_us=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d%s\n",
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    wrong, acq, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, timing))
end
