-- hold_for_input: the lease holder shows a working task as input_required while it keeps the
-- lease (an upstream server asked mid-call on a live session, which cannot be replayed: the
-- one opt-in exception to invariant 6). The request is stored like a park's, under a key never
-- issued before; `held` marks the task so that the answer goes back to this worker instead of
-- the queue, renewals go on, and a lapsed lease fails the task instead of requeuing it.
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] issued: issued set   KEYS[4] timeline: timeline
-- KEYS[5] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1..3] lease (lease): task id, worker id, fencing token   ARGV[4] message: status message
-- ARGV[5] events: events channel   ARGV[6] key: key   ARGV[7] request: request JSON
-- Returns {1, version} held | {2} a cancel is pending (nothing written) | {-2} lease lost
--       | {-5, key} key already issued.
-- Publishes "<id> <version> input_required".
local rcall = redis.call
local record, inputs, issued = KEYS[1], KEYS[2], KEYS[3]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'cancel', 'created', 'ttl', 'obx')
if f[1] ~= 'working' or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then return {REPLY.LEASE_LOST} end
if f[4] then return {2} end
if rcall('SISMEMBER', issued, ARGV[6]) == 1 then return {REPLY.KEY_REUSED, ARGV[6]} end
local box = outbox_of(f[7])
local wrong_outbox = other_outbox(KEYS[5], box)
if wrong_outbox then return wrong_outbox end
local now = now_ms()
local expires = tonumber(f[5]) + tonumber(f[6])
rcall('SADD', issued, ARGV[6])
rcall('HSET', inputs, ARGV[6], ARGV[7])
rcall('PEXPIREAT', issued, expires)
rcall('PEXPIREAT', inputs, expires)
rcall('HSET', record, 'status', 'input_required', 'held', 1, 'msg', ARGV[4], 'updated', now, 'parked', now)
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[4], now, {ev = 'asked, held', to = 'input_required', fence = tonumber(ARGV[3]), holder = ARGV[2]})
announce(ARGV[5], KEYS[5], box, ARGV[1], ver, 'input_required', now, true)
return {REPLY.OK, ver}
