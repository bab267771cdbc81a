-- cancel_task: tasks/cancel. Ownership is checked here. Terminal: nothing changes.
-- Queued (working, no holder) or parked (input_required): cancelled at once; a queue entry
-- left behind is skipped by claim_task. Running: the cancel flag is set and the lease holder
-- is signalled; the worker ends the task at the tool's next checkpoint (invariant 8). Held
-- (hold_for_input): cancelled at once like a parked task, its lease dropped, and the holder
-- signalled so that it tells the upstream server.
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] leases: shard lease index   KEYS[4] timeline: timeline
-- KEYS[5] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1] task_id: task id   ARGV[2] tenant: tenant   ARGV[3] principal: principal
-- ARGV[4] message: status message   ARGV[5] events: events channel
-- ARGV[6] signal_prefix: signal channel prefix (the holder's id is appended)
-- ARGV[7..8] operator (pair): an operator's "tenant/principal" ('' = the owner's own cancel: the
--   tenant and principal must match), and the reason
-- Returns {1, version, status before, ms spent in input_required if it was parked (else -1),
--         tenant if counted as active else ''} cancelled | {2} flagged, holder signalled
--       | {0, tenant if counted as active else ''} already terminal (perhaps this same cancel,
--         re-sent after its reply was lost: the store frees the slot again, harmlessly)
--       | {-1} not found (or not the owner).
local rcall = redis.call
local record, inputs = KEYS[1], KEYS[2]
local f = rcall('HMGET', record, 'tenant', 'principal', 'status', 'holder', 'parked', 'held', 'cancel', 'counted', 'obx')
local operator = ARGV[7] ~= '' and ARGV[7] or nil
if not f[1] or (not operator and (f[1] ~= ARGV[2] or f[2] ~= ARGV[3])) then return {REPLY.NOT_FOUND} end
local status = f[3]
local slot = f[8] and f[1] or ''
if status ~= 'working' and status ~= 'input_required' then return {REPLY.NOTHING, slot} end
local box = outbox_of(f[9])
local now = now_ms()
if status == 'working' and f[4] then
  if not f[7] then
    rcall('HSET', record, 'cancel', 1)
    timeline(KEYS[4], now, {ev = 'cancel requested', to = 'working', holder = f[4], by = operator,
      why = operator and ARGV[8] or nil})
  end
  rcall('PUBLISH', ARGV[6] .. f[4], ARGV[1])
  return {2}
end
local wrong_outbox = other_outbox(KEYS[5], box)
if wrong_outbox then return wrong_outbox end
rcall('DEL', inputs)
if f[6] then
  rcall('HDEL', record, 'holder', 'lease', 'held', 'entry', 'queued', 'claimed', 'x')
  rcall('ZREM', KEYS[3], ARGV[1])
  if f[4] then rcall('PUBLISH', ARGV[6] .. f[4], ARGV[1]) end
end
rcall('HSET', record, 'status', 'cancelled', 'msg', ARGV[4], 'updated', now, 'cancel', 1)
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[4], now, {ev = 'cancelled', to = 'cancelled', by = operator, why = operator and ARGV[8] or nil})
announce(ARGV[5], KEYS[5], box, ARGV[1], ver, 'cancelled', now, true)
local waited = -1
if status == 'input_required' then waited = since(f[5], now) end
return {REPLY.OK, ver, status, waited, slot}
