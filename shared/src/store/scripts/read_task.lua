-- read_task: a task's record fields and its outstanding input requests, read together. A
-- pipeline of two reads could pair `input_required` at one version with the inputs of a later
-- round (an answer and a new park landing between the reads); one script cannot.
-- KEYS[1] task record   KEYS[2] inputs hash
-- ARGV[1..] the record fields to read, in order
-- Returns {fields (in ARGV order), inputs (flat k,v)}.
local rcall = redis.call
return {rcall('HMGET', KEYS[1], unpack(ARGV)), rcall('HGETALL', KEYS[2])}
