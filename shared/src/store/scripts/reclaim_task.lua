-- reclaim_task: the reaper's step for one lease-index entry whose score is due. Re-checks the
-- record (the index is a hint): a live lease re-syncs the index; an expired one requeues the
-- task and counts a reclaim; past the maximum the task fails; a requested cancel ends it
-- cancelled. Safe when several reapers race. A held task (hold_for_input) whose lease lapsed
-- lost the upstream session its question belonged to: it fails, it is not requeued.
-- KEYS[1] record: task record   KEYS[2] leases: shard lease index   KEYS[3] stream: the queue of pool ARGV[9] on the shard
-- KEYS[4] inputs: inputs hash
-- KEYS[5] timeline: timeline   KEYS[6] ready: the pool's ready set on the shard   KEYS[7] fair: its fairness tags
-- KEYS[8] outbox: the owner's outbox on the shard (prelude: other_outbox, announce); the reaper declares the shard's placeholder
-- ARGV[1] task_id (task): task id   ARGV[2] max_reclaims (u32): max reclaims
-- ARGV[3..4] failure (pair): failure error JSON, failure message
-- ARGV[5] cancelled_message: cancelled message   ARGV[6] events: events channel
-- ARGV[7..8] held_lost (pair): held-lost error JSON, held-lost message
-- ARGV[9] pool: the pool whose queue KEYS[3] is
-- Returns {1} requeued | {4, ver, tenant} failed | {3, ver, tenant} cancelled | {0} nothing to do
--       | {-11, owner} the task has an outbox and KEYS[8] is not it: nothing written, ask again
--         with that owner's (prelude: other_outbox)
--       | {-10, pool} it would be requeued but belongs to this other pool: nothing written, ask
--         again with that pool's queue
--       | {5, tenant} the task had already ended (a replay of a reclaim that failed or cancelled
--         it, whose reply was lost: the caller still releases the active-task slot)
-- (tenant is '' when the task was not counted as active).
local rcall = redis.call
local record, leases, stream, inputs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local f = rcall('HMGET', record, 'status', 'holder', 'lease', 'reclaims', 'cancel', 'tenant', 'counted', 'held',
  'fence', 'pool', 'obx')
local held = f[1] == 'input_required' and f[8]
if (f[1] ~= 'working' and not held) or not f[2] then
  rcall('ZREM', leases, ARGV[1])
  if f[1] == 'completed' or f[1] == 'failed' or f[1] == 'cancelled' then
    return {REPLY.ALREADY_ENDED, (f[7] == '1' and f[6]) or ''}
  end
  return {REPLY.NOTHING}
end
local now = now_ms()
if tonumber(f[3]) > now then
  rcall('ZADD', leases, f[3], ARGV[1])
  return {REPLY.NOTHING}
end
-- Only a requeue needs the task's own queue; failing or cancelling it writes no stream.
if not held and not f[5] and tonumber(f[4] or '0') + 1 <= tonumber(ARGV[2]) then
  local wrong = other_pool(f[10], ARGV[9])
  if wrong then return wrong end
end
local box = outbox_of(f[11])
local wrong_outbox = other_outbox(KEYS[8], box)
if wrong_outbox then return wrong_outbox end
rcall('HDEL', record, 'holder', 'lease', 'held', 'claimed')
rcall('ZREM', leases, ARGV[1])
local reclaims = rcall('HINCRBY', record, 'reclaims', 1)
local status
if held then
  status = 'failed'
  rcall('DEL', inputs)
  rcall('HSET', record, 'status', status, 'error', ARGV[7], 'msg', ARGV[8], 'updated', now)
elseif f[5] then
  status = 'cancelled'
  rcall('HSET', record, 'status', status, 'msg', ARGV[5], 'updated', now)
elseif reclaims > tonumber(ARGV[2]) then
  status = 'failed'
  rcall('DEL', inputs)
  rcall('HSET', record, 'status', status, 'error', ARGV[3], 'msg', ARGV[4], 'updated', now)
else
  rcall('HSET', record, 'queued', now)
  enqueue(stream, KEYS[6], KEYS[7], ARGV[1])
  timeline(KEYS[5], now, {ev = 'lease expired, requeued', to = 'working', fence = tonumber(f[9]), holder = f[2]})
  return {REPLY.OK}
end
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[5], now, {ev = 'lease expired', to = status, fence = tonumber(f[9]), holder = f[2]})
announce(ARGV[6], KEYS[8], box, ARGV[1], ver, status, now, true)
local tenant = (f[7] == '1' and f[6]) or ''
if status == 'failed' then return {REPLY.FAILED, ver, tenant} end
return {REPLY.CANCELLED, ver, tenant}
