-- fail_task: an operator ends a stuck task as failed, whoever owns it. Terminal: nothing
-- changes (invariant 4). A lease is dropped and its holder signalled, as for a cancel of a
-- held task: the worker's later writes find the lease gone and are refused by their fence.
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] leases: shard lease index   KEYS[4] timeline: timeline
-- KEYS[5] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1] task_id: task id   ARGV[2] error: error JSON   ARGV[3] message: status message
-- ARGV[4] events: events channel   ARGV[5] signal_prefix: signal channel prefix
-- ARGV[6..7] operator (pair): the operator's "tenant/principal", and the reason
-- Returns {1, version, tenant if counted as active else '', the status it had} | {0} already
-- terminal
--   | {-1} not found.
-- Publishes "<id> <version> failed".
local rcall = redis.call
local record = KEYS[1]
local f = rcall('HMGET', record, 'status', 'holder', 'tenant', 'counted', 'obx')
if not f[1] then return {REPLY.NOT_FOUND} end
if f[1] ~= 'working' and f[1] ~= 'input_required' then return {REPLY.NOTHING} end
local box = outbox_of(f[5])
local wrong_outbox = other_outbox(KEYS[5], box)
if wrong_outbox then return wrong_outbox end
local now = now_ms()
rcall('DEL', KEYS[2])
rcall('ZREM', KEYS[3], ARGV[1])
-- What only a queued or running task needs goes with its end (a smaller record for its TTL).
rcall('HDEL', record, 'holder', 'lease', 'held', 'entry', 'queued', 'claimed', 'x')
rcall('HSET', record, 'status', 'failed', 'error', ARGV[2], 'msg', ARGV[3], 'updated', now)
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[4], now, {ev = 'failed by an operator', to = 'failed', holder = f[2] or nil, by = ARGV[6], why = ARGV[7]})
if f[2] then rcall('PUBLISH', ARGV[5] .. f[2], ARGV[1]) end
announce(ARGV[4], KEYS[5], box, ARGV[1], ver, 'failed', now, true)
return {REPLY.OK, ver, (f[4] == '1' and f[3]) or '', f[1]}
