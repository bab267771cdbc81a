-- mark_started: the lease holder records, before a side effect that must not run twice
-- unasked, that a run of this task has begun it. The previous marker tells a run after a
-- reclaim that an earlier run may already have caused the effect.
-- KEYS[1] record: task record
-- ARGV[1..2] lease (holder): worker id, fencing token
-- Returns {1, previous fence or 0} | {-2} lease lost.
local rcall = redis.call
local record = KEYS[1]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'started')
if f[1] ~= 'working' or f[2] ~= ARGV[1] or f[3] ~= ARGV[2] then return {REPLY.LEASE_LOST} end
local before = tonumber(f[4] or '0')
if before == tonumber(ARGV[2]) then before = 0 end
rcall('HSET', record, 'started', ARGV[2])
return {REPLY.OK, before}
