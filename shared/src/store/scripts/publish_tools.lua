-- publish_tools: a worker's heartbeat into the tool catalogue. Each spec is written and its
-- entry in the live index pushed out to now + ttl; specs nobody has renewed are removed, so a
-- tool leaves tools/list once no live worker serves it. The worker's configuration digest is
-- kept the same way, and the live digests are returned so a worker can see that the fleet
-- disagrees about what it serves.
-- Pools (docs/design.md, "Worker pools"): liveness is also kept per (pool, tool), with when
-- the pair last became live; a tool's route (the pool its new tasks are queued on) is the live
-- pool that most recently started serving it, ties kept by the pool that has it. Only the
-- routed pool writes the tool's spec, so two pools publishing different specs of one name do
-- not flap it every heartbeat: the spec listed is the routed pool's.
-- KEYS[1] specs: specs hash (name -> ToolSpec JSON)   KEYS[2] live: live index (name -> expiry ms)
-- KEYS[3] digests: digests index (digest -> expiry ms)   KEYS[4] workers: workers (worker id -> status JSON)
-- KEYS[5] workers_live: live workers (worker id -> expiry ms)   KEYS[6] serving: serving ("<pool> <name>" -> expiry ms)
-- KEYS[7] serving_since: serving since ("<pool> <name>" -> ms it became live)   KEYS[8] routes: routes (name -> pool)
-- KEYS[9] pools: pools (pool -> its last heartbeat, ms: what the console lists)
-- ARGV[1] ttl ms   ARGV[2] digest ('' for none)   ARGV[3] worker id   ARGV[4] its status JSON
--   (what the operator console shows: slots, busy, upstream links)   ARGV[5] the worker's pool
-- ARGV[6..] name, spec JSON pairs; an empty spec marks a name live without a spec (the hidden
--   tasks a worker can run: a worker that cannot run one hands it back only while another can)
-- Returns {1, {live digests}}.
local rcall = redis.call
local specs, live, digests = KEYS[1], KEYS[2], KEYS[3]
local serving, since, routes = KEYS[6], KEYS[7], KEYS[8]
local pool = ARGV[5]
local now = now_ms()
local expiry = now + tonumber(ARGV[1])
local function live_until(pair) return tonumber(rcall('ZSCORE', serving, pair) or '0') end
rcall('HSET', KEYS[4], ARGV[3], ARGV[4])
rcall('HSET', KEYS[9], pool, now)
rcall('ZADD', KEYS[5], expiry, ARGV[3])
for i = 6, #ARGV, 2 do
  local name, spec = ARGV[i], ARGV[i + 1]
  local pair = pool .. ' ' .. name
  if live_until(pair) <= now then rcall('HSET', since, pair, now) end
  rcall('ZADD', serving, 'GT', expiry, pair)
  local routed = rcall('HGET', routes, name)
  local take = not routed or routed == pool
  if not take then
    local other = routed .. ' ' .. name
    take = live_until(other) <= now
      or tonumber(rcall('HGET', since, pair) or '0') > tonumber(rcall('HGET', since, other) or '0')
  end
  if take then
    if routed ~= pool then rcall('HSET', routes, name, pool) end
    if spec ~= '' then rcall('HSET', specs, name, spec) end
  end
  rcall('ZADD', live, 'GT', expiry, name)
end
if ARGV[2] ~= '' then rcall('ZADD', digests, 'GT', expiry, ARGV[2]) end
local gone = rcall('ZRANGEBYSCORE', live, '-inf', now)
for _, name in ipairs(gone) do
  rcall('HDEL', specs, name)
  rcall('HDEL', routes, name)
end
if #gone > 0 then rcall('ZREMRANGEBYSCORE', live, '-inf', now) end
local stopped = rcall('ZRANGEBYSCORE', serving, '-inf', now)
for _, pair in ipairs(stopped) do rcall('HDEL', since, pair) end
if #stopped > 0 then rcall('ZREMRANGEBYSCORE', serving, '-inf', now) end
rcall('ZREMRANGEBYSCORE', digests, '-inf', now)
local dead = rcall('ZRANGEBYSCORE', KEYS[5], '-inf', now)
for _, worker in ipairs(dead) do rcall('HDEL', KEYS[4], worker) end
if #dead > 0 then rcall('ZREMRANGEBYSCORE', KEYS[5], '-inf', now) end
return {REPLY.OK, rcall('ZRANGE', digests, 0, -1)}
