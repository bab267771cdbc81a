-- finish_task: the lease holder writes the outcome: completed (result), failed (error) or
-- cancelled. Fenced; a terminal record is never written again (invariant 4). A completion
-- that lands before a requested cancel wins. A held task (hold_for_input) may be finished by
-- its holder too: the call ended while its question was still open.
-- KEYS[1] task record   KEYS[2] shard lease index   KEYS[3] inputs hash   KEYS[4] timeline
-- KEYS[5] outcome (a long outcome goes there: aside)
-- ARGV[1] task id   ARGV[2] worker id   ARGV[3] fencing token   ARGV[4] terminal status
-- ARGV[5] outcome field ('result' | 'error' | '')   ARGV[6] outcome JSON
-- ARGV[7] status message ('' = keep)   ARGV[8] events channel
-- Returns {1, version} | {-2} lease lost.
-- The holder is recorded as `finisher`, so a finish re-sent after its reply was lost is
-- recognised: the same worker and token on a record already ended with this status answers
-- {1, version} again, and the caller does its follow-up (releasing the active-task slot)
-- instead of reporting a lost lease.
-- Publishes "<id> <version> <status>".
local rcall = redis.call
local record, leases, inputs = KEYS[1], KEYS[2], KEYS[3]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'ver', 'finisher', 'held', 'created', 'ttl')
if f[1] == ARGV[4] and f[5] == ARGV[2] and f[3] == ARGV[3] then return {REPLY.OK, tonumber(f[4])} end
if (f[1] ~= 'working' and not (f[1] == 'input_required' and f[6])) or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then
  return {REPLY.LEASE_LOST}
end
local now = now_ms()
-- What only a queued or running task needs goes with its end (a smaller record for its TTL).
rcall('HDEL', record, 'holder', 'lease', 'held', 'entry', 'queued')
rcall('HSET', record, 'finisher', ARGV[2])
rcall('ZREM', leases, ARGV[1])
rcall('DEL', inputs)
rcall('HSET', record, 'status', ARGV[4], 'updated', now)
if ARGV[5] ~= '' then
  rcall('HSET', record, ARGV[5], aside(KEYS[5], ARGV[6], tonumber(f[7]) + tonumber(f[8])))
end
if ARGV[7] ~= '' then rcall('HSET', record, 'msg', ARGV[7]) end
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[4], now, {ev = 'finished', to = ARGV[4], fence = tonumber(ARGV[3]), holder = ARGV[2]})
publish_event(ARGV[8], ARGV[1] .. ' ' .. ver .. ' ' .. ARGV[4])
return {REPLY.OK, ver}
