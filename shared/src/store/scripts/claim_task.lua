-- claim_task: take a fenced lease on the fairest queued task of the worker's pool on a shard.
-- A delivery (one stream entry) only wakes a worker: the task it takes is the one with the
-- lowest tag in the ready set (prelude: enqueue). The caller names a candidate, first the
-- entry's own task; when another task has a lower tag, nothing is written and the script names
-- the one at the front, for the caller to ask again with its keys declared (a script touches
-- only the keys it is handed). The entry is acked and deleted by the claim that takes a task from the ready
-- set, or when nothing is queued: each entry takes at most one task, so no task is ever left
-- queued without an entry to wake a worker for it.
-- The record decides (invariant 1): only a `working` task with no holder is claimable; one
-- that is not (cancelled while queued) still leaves the ready set, for nothing.
-- A candidate that is `working`, unheld and not in the ready set was queued before fair
-- dispatch existed (a rolling upgrade): its own entry claims it directly.
-- The claim raises the fencing token (below); it changes nothing a client sees, so no version
-- bump.
-- Idempotent for one (worker, entry): a re-sent claim whose first run took the lease (its reply
-- was lost) answers that same claim again instead of "not claimable", so the lease is not held
-- by a worker that never runs the task.
-- KEYS[1] record: candidate's record   KEYS[2] stream: the stream the entry was delivered from (the claiming
-- worker's pool's on the shard)   KEYS[3] leases: shard lease index   KEYS[4] answers: candidate's answers hash
-- KEYS[5] timeline: candidate's timeline   KEYS[6] steps: candidate's steps hash   KEYS[7] ready: the pool's ready set on
-- the shard   KEYS[8] fair: its fairness tags   KEYS[9] args: candidate's arguments set aside (prelude: aside)
-- KEYS[10] rel: candidate's related task ids (a JSON array the gateway wrote before the create; absent: none)
-- ARGV[1] entry_id: stream entry id   ARGV[2] task_id (task): candidate task id
-- ARGV[3] worker: worker id   ARGV[4] lease_ms (u64): lease ms   ARGV[5] group: consumer group
-- Returns {1, fence, tool, args, traceparent|'', cancelRequested 0|1, answers (flat k,v list),
--          the creator's clientCapabilities JSON,
--          the state the last park saved else '', '1' if the clientCapabilities JSON left out
--          the Tasks extension's declaration else '0', recorded steps (flat name,result list),
--          when it was queued (ms) else '', tenant, principal, related task ids JSON else ''}
--       | {0} nothing claimable (nothing queued, or the task taken had ended)
--       | {-11, task id} that task is at the front instead: nothing written, ask again with it.
local rcall = redis.call
local record, stream, leases, answers, ready = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7]
local f = rcall('HMGET', record, 'status', 'holder', 'tool', 'args', 'tp', 'cancel', 'caps', 'tenant', 'entry',
  'fence', 'tstate', 'capx', 'queued', 'principal')
local function granted(fence)
  return {REPLY.OK, fence, f[3], from_aside(f[4], KEYS[9]), f[5] or '', f[6] and 1 or 0, rcall('HGETALL', answers), f[7] or '{}',
    f[11] or '', f[12] or '0', rcall('HGETALL', KEYS[6]), f[13] or '', f[8] or '', f[14] or '',
    rcall('GET', KEYS[10]) or ''}
end
local unheld = f[1] == 'working' and not f[2]
if f[1] == 'working' and f[2] == ARGV[3] and f[9] == ARGV[1] then return granted(tonumber(f[10])) end
local head = rcall('ZRANGE', ready, 0, 0, 'WITHSCORES')
local mine = rcall('ZSCORE', ready, ARGV[2])
-- The candidate is taken when no queued task has a lower tag: a tie is as fair as the front,
-- and taking it spares a round trip (tasks of tenants with nothing else queued all tie).
if mine and tonumber(mine) <= tonumber(head[2]) then
  rcall('ZREM', ready, ARGV[2])
  drop_spent_tags(ready, KEYS[8], mine, f[8] and {[f[8]] = true} or {})
elseif head[1] and not (unheld and not mine) then
  return {-11, head[1]}
end
rcall('XACK', stream, ARGV[5], ARGV[1])
rcall('XDEL', stream, ARGV[1])
if not unheld then return {REPLY.NOTHING} end
local now = now_ms()
local lease_until = now + tonumber(ARGV[4])
-- The token is the claim's time (ms), or one more than the last token if that is later: it
-- grows with every claim, as a counter would, and a claim acknowledged by a primary that then
-- failed before replicating it cannot be handed out again by the promoted replica, whose
-- clock has moved on by the failover's length (docs/durability.md, "Fencing across a failover").
local fence = math.max(tonumber(f[10] or '0') + 1, now)
-- `claimed`: when this run began, for the time it spends working (returned by the scripts that
-- end the run: finish_task, request_input, release_task).
rcall('HSET', record, 'fence', string.format('%.0f', fence), 'holder', ARGV[3], 'lease', lease_until, 'entry', ARGV[1],
  'claimed', now)
rcall('ZADD', leases, lease_until, ARGV[2])
timeline(KEYS[5], now, {ev = 'claimed', to = 'working', fence = fence, holder = ARGV[3]})
return granted(fence)
