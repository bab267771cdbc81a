-- set_status: the lease holder updates the status message of its working task.
-- KEYS[1] record: task record
-- ARGV[1..3] lease (lease): task id, worker id, fencing token   ARGV[4] message: status message
-- ARGV[5] events: events channel
-- Returns {1, version} | {-2} lease lost.
-- Publishes "<id> <version> working".
local rcall = redis.call
local record = KEYS[1]
local f = rcall('HMGET', record, 'status', 'holder', 'fence')
if f[1] ~= 'working' or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then return {REPLY.LEASE_LOST} end
local now = now_ms()
rcall('HSET', record, 'msg', ARGV[4], 'updated', now)
local ver = rcall('HINCRBY', record, 'ver', 1)
publish_event(ARGV[5], ARGV[1] .. ' ' .. ver .. ' working')
return {REPLY.OK, ver}
