-- admit: fleet-wide admission of a request that creates a task, by GCRA (generic cell rate
-- algorithm): a request is allowed when the theoretical arrival time minus the burst tolerance
-- is not in the future. Nothing is written for a refused request. The tenant's creation rate
-- and its cap on tasks not yet terminal (a zset of task ids scored by expiry, so expired ids
-- fall out by themselves) are checked too, and the task is recorded as active. (A request that
-- creates nothing is admitted from its replica's slice: lease_requests.lua.)
-- KEYS[1] requests: request-rate TAT   KEYS[2] creations: creation-rate TAT   KEYS[3] active: active-task zset
-- ARGV[1] request interval ms ('0' = unlimited)   ARGV[2] request burst
-- ARGV[3] creation interval ms ('0' = unlimited)   ARGV[4] creation burst
-- ARGV[5] max active tasks ('0' = unlimited)   ARGV[6] task id   ARGV[7] task ttl ms
-- Returns {1} | {0, retry_after_ms, 'requests' | 'creations' | 'active_tasks'}.
local rcall = redis.call
local now = now_ms(true)

-- The new TAT if allowed, else nil and the wait.
local function gcra(key, interval, burst)
  if interval <= 0 then return false, 0 end
  local tat = tonumber(rcall('GET', key) or now)
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - interval * burst
  if allow_at > now then return nil, math.ceil(allow_at - now) end
  return new_tat, 0
end

local function commit(key, new_tat)
  if new_tat then
    rcall('SET', key, string.format('%.3f', new_tat), 'PX', math.ceil(new_tat - now) + 1000)
  end
end

local req_tat, wait = gcra(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
if req_tat == nil then return {REPLY.NOTHING, wait, 'requests'} end
local create_tat
create_tat, wait = gcra(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
if create_tat == nil then return {REPLY.NOTHING, wait, 'creations'} end
local cap = tonumber(ARGV[5])
if cap > 0 then
  rcall('ZREMRANGEBYSCORE', KEYS[3], '-inf', math.floor(now))
  if rcall('ZCARD', KEYS[3]) >= cap then return {REPLY.NOTHING, 1000, 'active_tasks'} end
end
commit(KEYS[1], req_tat)
commit(KEYS[2], create_tat)
if cap > 0 then
  local expires = math.floor(now) + tonumber(ARGV[7])
  rcall('ZADD', KEYS[3], expires, ARGV[6])
  -- The set lives as long as its longest-lived member.
  local ttl = rcall('PTTL', KEYS[3])
  if ttl < 0 or ttl < tonumber(ARGV[7]) then rcall('PEXPIREAT', KEYS[3], expires) end
end
return {REPLY.OK}
