-- pass_wakeup: a claim that kept finding another task at the front of the ready set (other
-- claims on the shard took each one first) hands its wake-up back instead of leaving it pending:
-- the entry is acked and deleted and the same wake-up written again at the end of the stream,
-- for the next read. The entries still number at least the queued tasks (claim_task).
-- KEYS[1] stream: the stream the entry was delivered from
-- ARGV[1] entry_id: entry id   ARGV[2] group: consumer group
-- ARGV[3] task_id: the task id the entry names
-- Returns 1 when the entry was still pending and is passed on, 0 when it was gone.
local rcall = redis.call
if rcall('XACK', KEYS[1], ARGV[2], ARGV[1]) == 0 then return 0 end
rcall('XDEL', KEYS[1], ARGV[1])
rcall('XADD', KEYS[1], '*', 'id', ARGV[3])
return 1
