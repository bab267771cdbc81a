-- release_task: a draining worker hands back a task it could not finish, so another worker
-- takes it at once instead of after the lease expires. Not counted as a reclaim. A requested
-- cancel ends the task cancelled instead. A held question (hold_for_input) cannot go with the
-- task: its session ends with this worker, so the task fails at once instead.
-- KEYS[1] record: task record   KEYS[2] leases: shard lease index   KEYS[3] stream: the queue of pool ARGV[8] on the shard
-- KEYS[4] inputs: inputs hash
-- KEYS[5] timeline: timeline   KEYS[6] ready: the pool's ready set on the shard   KEYS[7] fair: its fairness tags
-- KEYS[8] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1..3] lease (lease): task id, worker id, fencing token
-- ARGV[4] cancelled_message: cancelled message   ARGV[5] events: events channel
-- ARGV[6..7] held_lost (pair): held-lost error JSON, held-lost message
-- ARGV[8] pool: the pool whose queue KEYS[3] is (the releasing worker's)
-- Returns {1} requeued | {3, ver, tenant, ms the run worked} cancelled | {4, ver, tenant} failed
--         (held) | {-2} lease lost
--       | {-10, pool} it would be requeued but belongs to this other pool: nothing written
-- (tenant is '' when the task was not counted as active).
local rcall = redis.call
local record, leases, stream = KEYS[1], KEYS[2], KEYS[3]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'cancel', 'held', 'pool', 'tenant', 'counted', 'claimed', 'obx')
local slot = f[8] and f[7] or ''
local held = f[1] == 'input_required' and f[5]
if (f[1] ~= 'working' and not held) or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then return {REPLY.LEASE_LOST} end
if not held and not f[4] then
  local wrong = other_pool(f[6], ARGV[8])
  if wrong then return wrong end
end
local box = outbox_of(f[10])
local wrong_outbox = other_outbox(KEYS[8], box)
if wrong_outbox then return wrong_outbox end
rcall('HDEL', record, 'holder', 'lease', 'held', 'claimed')
rcall('ZREM', leases, ARGV[1])
if held then
  local now = now_ms()
  rcall('DEL', KEYS[4])
  rcall('HSET', record, 'status', 'failed', 'error', ARGV[6], 'msg', ARGV[7], 'updated', now)
  local ver = rcall('HINCRBY', record, 'ver', 1)
  timeline(KEYS[5], now, {ev = 'released, question lost', to = 'failed', fence = tonumber(ARGV[3]), holder = ARGV[2]})
  announce(ARGV[5], KEYS[8], box, ARGV[1], ver, 'failed', now, true)
  return {REPLY.FAILED, ver, slot}
end
local now = now_ms()
if not f[4] then
  rcall('HSET', record, 'queued', now)
  enqueue(stream, KEYS[6], KEYS[7], ARGV[1])
  timeline(KEYS[5], now, {ev = 'released, requeued', to = 'working', fence = tonumber(ARGV[3]), holder = ARGV[2]})
  return {REPLY.OK}
end
rcall('HSET', record, 'status', 'cancelled', 'msg', ARGV[4], 'updated', now)
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[5], now, {ev = 'released, cancelled', to = 'cancelled', fence = tonumber(ARGV[3]), holder = ARGV[2]})
announce(ARGV[5], KEYS[8], box, ARGV[1], ver, 'cancelled', now, true)
return {REPLY.CANCELLED, ver, slot, since(f[9], now)}
