-- finish_batch: the lease holder writes the outcomes of several of its tasks in one run (the
-- prelude's finish_one for each, as finish_task does for one): one script call for a burst of
-- ends instead of one each. The tasks may be of several shards, one key entry each (the worker
-- sends one shard's alone where a command must keep to one slot, on a Cluster). Every task is
-- fenced on its own: a stale token's outcome is refused (its reply says so) and the others are
-- written; a terminal record is never written again (invariant 4). Redis's clock is read once
-- for the batch.
-- The task keys are derived here from the task ids and the layout in ARGV (`Keys::task_layout`),
-- not handed in KEYS, and the outbox from the record's owner, each after the prefix of the
-- shard its end names: every such key carries that shard's hash tag, so it is in the slot of
-- the shard's declared lease index (docs/architecture.md, invariant 2).
-- KEYS[1..] leases: the lease index of each shard of the batch
-- ARGV[1] worker: worker id   ARGV[2] inputs: inputs key suffix   ARGV[3] timeline: timeline key suffix
-- ARGV[4] outcome: set-aside outcome key suffix   ARGV[5] events: events channel
-- ARGV[6..] endings (pairs): first, for each lease index in the order of the keys, its shard's
--   record key prefix (a record is prefix .. id) and its outbox key before the owner; then for
--   each task its id and its ending, "<shard> <fence> <status> <field>" (shard: the place of its
--   shard's lease index among the keys, from 1), then the payload and the message as the next
--   pair ('' = none)
-- Returns {1, reply…}: each task's reply as finish_task's, in the order given.
local worker, shards = ARGV[1], #KEYS
local now = now_ms()
local out = {REPLY.OK}
for i = 6 + 2 * shards, #ARGV, 4 do
  local id = ARGV[i]
  local shard, fence, status, field = string.match(ARGV[i + 1], '^(%d+) (%S+) (%S+) ?(%S*)$')
  shard = tonumber(shard)
  if not shard or shard < 1 or shard > shards then
    return redis.error_reply('ERR finish_batch: ' .. id .. ' names no declared lease index')
  end
  local at = 4 + 2 * shard
  local record = ARGV[at] .. id
  local k = {record = record, leases = KEYS[shard], inputs = record .. ARGV[2], timeline = record .. ARGV[3],
    outcome = record .. ARGV[4], outbox_prefix = ARGV[at + 1]}
  out[#out + 1] = finish_one(k, id, worker, fence, status, field or '', ARGV[i + 2], ARGV[i + 3], ARGV[5], now)
end
return out
