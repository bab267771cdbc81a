-- held_answer: the holder of a held input (hold_for_input) looks for its answer.
-- KEYS[1] record: task record   KEYS[2] answers: answers hash
-- ARGV[1..2] lease (holder): worker id, fencing token   ARGV[3] key: key
-- Returns {1, answer JSON} answered (the task is working again) | {0} still waiting
--       | {5} the task ended meanwhile (cancelled, or expired) | {-2} lease lost.
local rcall = redis.call
local record, answers = KEYS[1], KEYS[2]
local f = rcall('HMGET', record, 'status', 'holder', 'fence', 'held')
if f[1] == 'cancelled' or f[1] == 'failed' or f[1] == 'completed' or not f[1] then return {REPLY.ALREADY_ENDED} end
if f[2] ~= ARGV[1] or f[3] ~= ARGV[2] then return {REPLY.LEASE_LOST} end
if f[1] == 'input_required' and f[4] then return {REPLY.NOTHING} end
local answer = rcall('HGET', answers, ARGV[3])
if not answer then return {REPLY.LEASE_LOST} end
return {REPLY.OK, answer}
