-- extend_lease: renew a held lease. Refused unless the caller still holds it with the same
-- fencing token and the task is still working (or shows input_required while held: see
-- hold_for_input).
-- Renewal changes nothing a client sees: no version bump, no event.
-- KEYS[1] record: task record   KEYS[2] leases: shard lease index
-- ARGV[1..3] lease (lease): task id, worker id, fencing token   ARGV[4] lease_ms (u64): lease ms
-- Returns {1, cancelRequested 0|1} | {-2} lease lost.
local rcall = redis.call
local record, leases = KEYS[1], KEYS[2]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'cancel', 'held')
if (f[1] ~= 'working' and not (f[1] == 'input_required' and f[5])) or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then return {REPLY.LEASE_LOST} end
local now = now_ms()
local lease_until = now + tonumber(ARGV[4])
rcall('HSET', record, 'lease', lease_until)
rcall('ZADD', leases, lease_until, ARGV[1])
return {REPLY.OK, f[4] and 1 or 0}
