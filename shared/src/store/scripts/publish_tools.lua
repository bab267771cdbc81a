-- publish_tools: a worker's heartbeat into the tool catalogue. Each spec is written and its
-- entry in the live index pushed out to now + ttl; specs nobody has renewed are removed, so a
-- tool leaves tools/list once no live worker serves it. The worker's configuration digest is
-- kept the same way, and the live digests are returned so a worker can see that the fleet
-- disagrees about what it serves.
-- KEYS[1] specs hash (name -> ToolSpec JSON)   KEYS[2] live index (name -> expiry ms)
-- KEYS[3] digests index (digest -> expiry ms)   KEYS[4] workers (worker id -> status JSON)
-- KEYS[5] live workers (worker id -> expiry ms)
-- ARGV[1] ttl ms   ARGV[2] digest ('' for none)   ARGV[3] worker id   ARGV[4] its status JSON
--   (what the operator console shows: slots, busy, upstream links)
-- ARGV[5..] name, spec JSON pairs; an empty spec marks a name live without a spec (the hidden
--   tasks a worker can run: a worker that cannot run one hands it back only while another can)
-- Returns {1, {live digests}}.
local rcall = redis.call
local specs, live, digests = KEYS[1], KEYS[2], KEYS[3]
local t = rcall('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
rcall('HSET', KEYS[4], ARGV[3], ARGV[4])
rcall('ZADD', KEYS[5], expiry, ARGV[3])
for i = 5, #ARGV, 2 do
  if ARGV[i + 1] ~= '' then rcall('HSET', specs, ARGV[i], ARGV[i + 1]) end
  rcall('ZADD', live, 'GT', expiry, ARGV[i])
end
if ARGV[2] ~= '' then rcall('ZADD', digests, 'GT', expiry, ARGV[2]) end
local gone = rcall('ZRANGEBYSCORE', live, '-inf', now)
for _, name in ipairs(gone) do rcall('HDEL', specs, name) end
if #gone > 0 then rcall('ZREMRANGEBYSCORE', live, '-inf', now) end
rcall('ZREMRANGEBYSCORE', digests, '-inf', now)
local dead = rcall('ZRANGEBYSCORE', KEYS[5], '-inf', now)
for _, worker in ipairs(dead) do rcall('HDEL', KEYS[4], worker) end
if #dead > 0 then rcall('ZREMRANGEBYSCORE', KEYS[5], '-inf', now) end
return {1, rcall('ZRANGE', digests, 0, -1)}
