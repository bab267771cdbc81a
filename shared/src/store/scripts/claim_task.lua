-- claim_task: take a fenced lease on a task delivered from its shard's stream.
-- The stream entry is a hint (invariant 1): it is acked and deleted whatever the outcome, and
-- the record decides. Only a `working` task with no holder is claimable.
-- The claim bumps the fencing token; it changes nothing a client sees, so no version bump.
-- Idempotent for one (worker, entry): a re-sent claim whose first run took the lease (its reply
-- was lost) answers that same claim again instead of "not claimable", so the lease is not held
-- by a worker that never runs the task.
-- KEYS[1] task record   KEYS[2] the stream it was delivered from (the claiming worker's pool's
-- queue on the shard; only a task of that pool is ever put there)   KEYS[3] shard lease index
-- KEYS[4] answers hash
-- KEYS[5] timeline   KEYS[6] steps hash (the durable steps recorded by earlier runs)
-- ARGV[1] stream entry id   ARGV[2] task id   ARGV[3] worker id   ARGV[4] lease ms
-- ARGV[5] consumer group
-- Returns {1, fence, tool, args, traceparent|'', cancelRequested 0|1, answers (flat k,v list),
--          the creator's clientCapabilities JSON, tenant if counted as active else '',
--          the state the last park saved else '', '1' if the clientCapabilities JSON left out
--          the Tasks extension's declaration else '0', recorded steps (flat name,result list)}
--       | {0} not claimable (gone, terminal, parked or held).
local rcall = redis.call
local record, stream, leases, answers = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
rcall('XACK', stream, ARGV[5], ARGV[1])
rcall('XDEL', stream, ARGV[1])
local f = rcall('HMGET', record, 'status', 'holder', 'tool', 'args', 'tp', 'cancel', 'caps', 'tenant', 'counted',
  'entry', 'fence', 'tstate', 'capx')
if f[1] ~= 'working' then return {0} end
local fence
if f[2] then
  if f[2] ~= ARGV[3] or f[10] ~= ARGV[1] then return {0} end
  fence = tonumber(f[11])
else
  local t = rcall('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local lease_until = now + tonumber(ARGV[4])
  fence = rcall('HINCRBY', record, 'fence', 1)
  rcall('HSET', record, 'holder', ARGV[3], 'lease', lease_until, 'entry', ARGV[1])
  rcall('ZADD', leases, lease_until, ARGV[2])
  timeline(KEYS[5], now, {ev = 'claimed', to = 'working', fence = fence, holder = ARGV[3]})
end
return {1, fence, f[3], f[4], f[5] or '', f[6] and 1 or 0, rcall('HGETALL', answers), f[7] or '{}', (f[9] == '1' and f[8]) or '', f[12] or '', f[13] or '0',
  rcall('HGETALL', KEYS[6])}
