-- record_step: the lease holder records the result of a durable step (ToolContext::step), so
-- that no later run of the task runs the step again: the next claim returns every recorded step.
-- Fenced like every worker write: a run whose lease was lost (a stale fencing token) writes
-- nothing. The steps hash expires with the task record (created + ttl).
-- A step already recorded keeps its first result: only this run can have written it (a claim
-- returns the steps recorded before it, and a stale token writes nothing), so it is this run's
-- own write sent again after a lost reply.
-- KEYS[1] record: task record   KEYS[2] steps: steps hash
-- ARGV[1..2] lease (holder): worker id, fencing token   ARGV[3] name: step name
-- ARGV[4] result: result JSON
-- Returns {1} | {-2} lease lost.
local rcall = redis.call
local record, steps = KEYS[1], KEYS[2]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'created', 'ttl')
if f[1] ~= 'working' or f[2] ~= ARGV[1] or f[3] ~= ARGV[2] then return {REPLY.LEASE_LOST} end
if rcall('HSETNX', steps, ARGV[3], ARGV[4]) == 1 then
  rcall('PEXPIREAT', steps, tonumber(f[4]) + tonumber(f[5]))
end
return {REPLY.OK}
