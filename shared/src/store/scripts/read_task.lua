-- read_task: a task's record fields and its outstanding input requests, read together. A
-- pipeline of two reads could pair `input_required` at one version with the inputs of a later
-- round (an answer and a new park landing between the reads); one script cannot.
-- A client's read names its owner: the owner fields are compared before anything else is
-- read, so another principal's task costs what an unknown one does and returns nothing of it.
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] outcome: outcome (from_aside)
-- ARGV[1] tenant   ARGV[2] principal (both '' = whoever owns it: a read for the service)
-- Returns {1, fields (HMGET order of SNAPSHOT_FIELDS), inputs (flat k,v)} | {-1} not found (or
-- not the owner).
-- The fields are named here rather than passed (each argument is a string Redis makes for the
-- script at every call); `result` and `error` are the 9th and 10th.
local rcall = redis.call
local who = rcall('HMGET', KEYS[1], 'tenant', 'principal')
if not who[1] then return {REPLY.NOT_FOUND} end
if ARGV[1] ~= '' and (who[1] ~= ARGV[1] or who[2] ~= ARGV[2]) then return {REPLY.NOT_FOUND} end
local FIELDS = {'tenant', 'principal', 'status', 'msg', 'created', 'updated', 'ttl', 'poll', 'result', 'error', 'ver'}
local f = rcall('HMGET', KEYS[1], unpack(FIELDS))
f[9], f[10] = from_aside(f[9], KEYS[3]), from_aside(f[10], KEYS[3])
return {REPLY.OK, f, rcall('HGETALL', KEYS[2])}
