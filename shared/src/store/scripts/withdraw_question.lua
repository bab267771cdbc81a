-- withdraw_question: the holder of a held question (hold_for_input) takes it back, because the
-- one who asked it stopped waiting (the upstream server withdrew it) while the call goes on.
-- The task is working again; its outstanding request is dropped (an answer to it is ignored).
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] timeline: timeline
-- KEYS[4] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1..3] lease (lease): task id, worker id, fencing token   ARGV[4] message: status message
-- ARGV[5] events: events channel
-- Returns {1, version} withdrawn | {0} nothing held (answered meanwhile) | {-2} lease lost.
-- Publishes "<id> <version> working".
local rcall = redis.call
local record, inputs = KEYS[1], KEYS[2]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'held', 'obx')
if f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then return {REPLY.LEASE_LOST} end
if f[1] ~= 'input_required' or not f[4] then
  if f[1] == 'working' then return {REPLY.NOTHING} end
  return {REPLY.LEASE_LOST}
end
local box = outbox_of(f[5])
local wrong_outbox = other_outbox(KEYS[4], box)
if wrong_outbox then return wrong_outbox end
local now = now_ms()
rcall('DEL', inputs)
rcall('HDEL', record, 'held')
rcall('HSET', record, 'status', 'working', 'msg', ARGV[4], 'updated', now)
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[3], now, {ev = 'question withdrawn', to = 'working', fence = tonumber(ARGV[3]), holder = ARGV[2]})
announce(ARGV[5], KEYS[4], box, ARGV[1], ver, 'working', now, true)
return {REPLY.OK, ver}
