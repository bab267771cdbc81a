-- save_state: the lease holder saves what a later run of the task needs to continue rather than
-- start over (such as the id of a task an upstream server created for the call), at once,
-- before anything else can happen to the run. The next claim returns it.
-- KEYS[1] record: task record
-- ARGV[1..2] lease (holder): worker id, fencing token   ARGV[3] state: state
-- Returns {1} | {-2} lease lost.
local rcall = redis.call
local record = KEYS[1]
local f = rcall('HMGET', record, 'status', 'holder', 'fence')
if f[1] ~= 'working' or f[2] ~= ARGV[1] or f[3] ~= ARGV[2] then return {REPLY.LEASE_LOST} end
rcall('HSET', record, 'tstate', ARGV[3])
return {REPLY.OK}
