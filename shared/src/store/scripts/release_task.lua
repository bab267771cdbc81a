-- release_task: a draining worker hands back a task it could not finish, so another worker
-- takes it at once instead of after the lease expires. Not counted as a reclaim. A requested
-- cancel ends the task cancelled instead.
-- KEYS[1] task record   KEYS[2] shard lease index   KEYS[3] shard stream
-- ARGV[1] task id   ARGV[2] worker id   ARGV[3] fencing token   ARGV[4] cancelled message
-- ARGV[5] events channel
-- Returns {1} requeued | {3, ver} cancelled | {-2} lease lost.
local rcall = redis.call
local record, leases, stream = KEYS[1], KEYS[2], KEYS[3]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'cancel')
if f[1] ~= 'working' or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then return {-2} end
rcall('HDEL', record, 'holder', 'lease')
rcall('ZREM', leases, ARGV[1])
if not f[4] then
  rcall('XADD', stream, '*', 'id', ARGV[1])
  return {1}
end
local t = rcall('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
rcall('HSET', record, 'status', 'cancelled', 'msg', ARGV[4], 'updated', now)
local ver = rcall('HINCRBY', record, 'ver', 1)
rcall('PUBLISH', ARGV[5], ARGV[1] .. ' ' .. ver .. ' cancelled')
return {3, ver}
