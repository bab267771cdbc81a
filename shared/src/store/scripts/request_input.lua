-- request_input: park a working task in input_required (invariant 6: no worker, lease or
-- connection is held while a human answers). The lease is released here.
-- Every key must never have been issued before; all keys of the call are checked first, so a
-- refusal writes nothing. A cancel requested meanwhile wins: the task ends cancelled.
-- The tool may save a state with the park (what it needs to continue rather than replay, such
-- as an upstream server's requestState); the next claim returns it. A park is a clean end of
-- the run, so the marker of a started side effect is cleared: the next run starts afresh.
-- KEYS[1] record: task record   KEYS[2] leases: shard lease index   KEYS[3] inputs: inputs hash   KEYS[4] issued: issued set
-- KEYS[5] timeline: timeline
-- KEYS[6] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1..3] lease (lease): task id, worker id, fencing token
-- ARGV[4] message: status message ('' = keep)   ARGV[5] events: events channel
-- ARGV[6] cancelled_message: cancelled status message   ARGV[7] tool_state: tool state ('' = none)
-- ARGV[8..] requests (pairs): key, request JSON pairs
-- Returns {1, version, ms the run worked} parked
--       | {3, version, tenant if counted as active else '', ms the run worked} cancelled instead
--       | {-2} lease lost
--       | {-5, key} key already issued.
-- Publishes "<id> <version> input_required" (or cancelled).
local rcall = redis.call
local record, leases, inputs, issued = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'cancel', 'created', 'ttl', 'tenant', 'counted',
  'claimed', 'obx')
if f[1] ~= 'working' or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then return {REPLY.LEASE_LOST} end
for i = 8, #ARGV, 2 do
  if rcall('SISMEMBER', issued, ARGV[i]) == 1 then return {REPLY.KEY_REUSED, ARGV[i]} end
end
local box = outbox_of(f[10])
local wrong_outbox = other_outbox(KEYS[6], box)
if wrong_outbox then return wrong_outbox end
local now = now_ms()
local expires = tonumber(f[5]) + tonumber(f[6])
rcall('HDEL', record, 'holder', 'lease', 'claimed')
rcall('ZREM', leases, ARGV[1])
local status = 'input_required'
if f[4] then
  status = 'cancelled'
  rcall('HSET', record, 'status', status, 'msg', ARGV[6], 'updated', now)
else
  for i = 8, #ARGV, 2 do
    rcall('SADD', issued, ARGV[i])
    rcall('HSET', inputs, ARGV[i], ARGV[i + 1])
  end
  rcall('PEXPIREAT', issued, expires)
  rcall('PEXPIREAT', inputs, expires)
  rcall('HSET', record, 'status', status, 'updated', now, 'parked', now)
  if ARGV[7] ~= '' then rcall('HSET', record, 'tstate', ARGV[7]) else rcall('HDEL', record, 'tstate') end
  rcall('HDEL', record, 'started')
  if ARGV[4] ~= '' then rcall('HSET', record, 'msg', ARGV[4]) end
end
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[5], now, {ev = status == 'cancelled' and 'cancelled' or 'asked, parked', to = status,
  fence = tonumber(ARGV[3]), holder = ARGV[2]})
announce(ARGV[5], KEYS[6], box, ARGV[1], ver, status, now, true)
local ran = since(f[9], now)
if status == 'cancelled' then return {REPLY.CANCELLED, ver, f[8] and f[7] or '', ran} end
return {REPLY.OK, ver, ran}
