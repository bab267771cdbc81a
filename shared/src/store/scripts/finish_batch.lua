-- finish_batch: the lease holder writes the outcomes of several of its tasks on one shard in one
-- run (the prelude's finish_one for each, as finish_task does for one): one script call for a
-- burst of ends instead of one each. Every task is fenced on its own: a stale token's outcome is
-- refused (its reply says so) and the others are written; a terminal record is never written
-- again (invariant 4). Redis's clock is read once for the batch.
-- The task keys are derived here from the task ids and the layout in ARGV (`Keys::task_layout`),
-- not handed in KEYS, and the outbox from the record's owner: every such key carries the
-- shard's hash tag, so it is in the slot of the declared lease index (docs/architecture.md,
-- invariant 2).
-- KEYS[1] leases: shard lease index
-- ARGV[1] worker: worker id   ARGV[2] prefix: the shard's record key prefix (a record is prefix .. id)
-- ARGV[3] inputs: inputs key suffix   ARGV[4] timeline: timeline key suffix
-- ARGV[5] outcome: set-aside outcome key suffix   ARGV[6] outbox: the shard's outbox key before the owner
-- ARGV[7] events: events channel
-- ARGV[8..] endings (pairs): for each task its id and its ending, "<fence> <status> <field>", then
--   the payload and the message as the next pair ('' = none)
-- Returns {1, reply…}: each task's reply as finish_task's, in the order given.
local worker, prefix = ARGV[1], ARGV[2]
local now = now_ms()
local out = {REPLY.OK}
for i = 8, #ARGV, 4 do
  local id = ARGV[i]
  local fence, status, field = string.match(ARGV[i + 1], '^(%S+) (%S+) ?(%S*)$')
  local record = prefix .. id
  local k = {record = record, leases = KEYS[1], inputs = record .. ARGV[3], timeline = record .. ARGV[4],
    outcome = record .. ARGV[5], outbox_prefix = ARGV[6]}
  out[#out + 1] = finish_one(k, id, worker, fence, status, field or '', ARGV[i + 2], ARGV[i + 3], ARGV[7], now)
end
return out
