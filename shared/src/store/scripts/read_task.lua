-- read_task: a task's record fields and its outstanding input requests, read together. A
-- pipeline of two reads could pair `input_required` at one version with the inputs of a later
-- round (an answer and a new park landing between the reads); one script cannot.
-- A client's read names its owner: the owner fields are compared before anything else is
-- read, so another principal's task costs what an unknown one does and returns nothing of it.
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] outcome: outcome (read_outcomes)
-- ARGV[1] tenant   ARGV[2] principal (both '' = whoever owns it: a read for the service)
-- Returns {1, fields (HMGET order of SNAPSHOT_FIELDS), inputs (flat k,v)} | {-1} not found (or
-- not the owner).
-- The fields are named here rather than passed: each argument is a string Redis makes for the
-- script at every call.
local rcall = redis.call
local who = rcall('HMGET', KEYS[1], 'tenant', 'principal')
if not who[1] then return {REPLY.NOT_FOUND} end
if ARGV[1] ~= '' and (who[1] ~= ARGV[1] or who[2] ~= ARGV[2]) then return {REPLY.NOT_FOUND} end
local FIELDS = {'tenant', 'principal', 'status', 'msg', 'created', 'updated', 'ttl', 'poll', 'result', 'error', 'ver'}
return {REPLY.OK, read_outcomes(rcall('HMGET', KEYS[1], unpack(FIELDS)), FIELDS, KEYS[3]), rcall('HGETALL', KEYS[2])}
