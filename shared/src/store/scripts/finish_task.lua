-- finish_task: the lease holder writes the outcome: completed (result), failed (error) or
-- cancelled. Fenced; a terminal record is never written again (invariant 4). A completion
-- that lands before a requested cancel wins. A held task (hold_for_input) may be finished by
-- its holder too: the call ended while its question was still open.
-- KEYS[1] record: task record   KEYS[2] leases: shard lease index   KEYS[3] inputs: inputs hash   KEYS[4] timeline: timeline
-- KEYS[5] outcome: outcome (a long outcome goes there: aside)
-- KEYS[6] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1..3] lease (lease): task id, worker id, fencing token
-- ARGV[4] status (status): terminal status
-- ARGV[5] field: outcome field ('result' | 'error' | '')   ARGV[6] payload: outcome JSON
-- ARGV[7] message: status message ('' = keep)   ARGV[8] events: events channel
-- Returns {1, version, tenant if counted as active else '', ms the run worked (prelude: since)}
--       | {-2} lease lost.
-- The holder is recorded as `finisher`, so a finish re-sent after its reply was lost is
-- recognised: the same worker and token on a record already ended with this status answers
-- {1, version, tenant, -1} again (the run's `claimed` went with the first), and the store does its
-- follow-up (freeing the active-task slot) instead of reporting a lost lease.
-- Publishes "<id> <version> <status>".
local rcall = redis.call
local record, leases, inputs = KEYS[1], KEYS[2], KEYS[3]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'ver', 'finisher', 'held', 'created', 'ttl', 'tenant',
  'counted', 'claimed', 'obx', 'parked')
local slot = f[10] and f[9] or ''
if f[1] == ARGV[4] and f[5] == ARGV[2] and f[3] == ARGV[3] then return {REPLY.OK, tonumber(f[4]), slot, -1} end
if (f[1] ~= 'working' and not (f[1] == 'input_required' and f[6])) or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then
  return {REPLY.LEASE_LOST}
end
local box = outbox_of(f[12])
local wrong_outbox = other_outbox(KEYS[6], box)
if wrong_outbox then return wrong_outbox end
local now = now_ms()
-- What only a queued or running task needs goes with its end (a smaller record for its TTL).
rcall('HDEL', record, 'holder', 'lease', 'held', 'entry', 'queued', 'claimed', 'x')
rcall('ZREM', leases, ARGV[1])
-- Only a run that asked for input (`parked`, never removed) can have left open questions.
if f[13] then rcall('DEL', inputs) end
-- One HSET for every field the end writes, the version included (read above, in this same
-- script, so nothing can move it between): each command inside a script costs Redis a call.
local ver = tonumber(f[4] or '0') + 1
local fields = {'finisher', ARGV[2], 'status', ARGV[4], 'updated', now, 'ver', ver}
if ARGV[5] ~= '' then
  fields[#fields + 1] = ARGV[5]
  fields[#fields + 1] = aside(KEYS[5], ARGV[6], tonumber(f[7]) + tonumber(f[8]))
end
if ARGV[7] ~= '' then
  fields[#fields + 1] = 'msg'
  fields[#fields + 1] = ARGV[7]
end
rcall('HSET', record, unpack(fields))
timeline(KEYS[4], now, {ev = 'finished', to = ARGV[4], fence = tonumber(ARGV[3]), holder = ARGV[2]})
announce(ARGV[8], KEYS[6], box, ARGV[1], ver, ARGV[4], now, true)
return {REPLY.OK, ver, slot, since(f[11], now)}
