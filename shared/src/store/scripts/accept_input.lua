-- accept_input: store a client's answers (tasks/update). Ownership is checked here
-- (invariant 10). Answers to unknown, already answered or superseded keys are ignored.
-- When no request is left outstanding the task goes back to working and onto its shard's queue,
-- charged to its tenant like a new task (prelude: enqueue): the run the answer starts is new
-- work the tenant chose when to ask for, and at the front a tenant could answer many parked
-- tasks at once to run them all ahead of every other tenant. A held task (hold_for_input) goes
-- back to the worker holding it instead, through its signal channel, with "answered <id>".
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] answers: answers hash
-- KEYS[4] stream: the queue of pool ARGV[7] on the task's shard
-- KEYS[5] timeline: timeline   KEYS[6] ready: the pool's ready set on the shard   KEYS[7] fair: its fairness tags
-- KEYS[8] outbox: the owner's outbox on the shard (prelude: other_outbox, announce)
-- ARGV[1] id (task): task id   ARGV[2..3] owner (owner): tenant, principal
-- ARGV[4] events: events channel   ARGV[5] resume_message: status message when resumed ('' = keep)
-- ARGV[6] signal_prefix: signal channel prefix   ARGV[7] pool: the pool whose queue KEYS[4] is
-- ARGV[8] weight (f64): the tenant's weight (its share of the pool when several tenants have
--   tasks queued)
-- ARGV[9..] answers (pairs): key, response JSON pairs
-- Returns {1, version, resumed 0|1, ms spent in input_required when resumed (else -1)}
--       | {0} nothing applied | {-1} not found (or not the owner)
--       | {-10, pool} the owner's parked task belongs to this other pool: nothing written, ask
--         again with that pool's queue (checked before any answer is taken, so a retry applies
--         them exactly once).
-- Publishes "<id> <version> <status>" when anything changed.
local rcall = redis.call
local record, inputs, answers, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local f = rcall('HMGET', record, 'tenant', 'principal', 'status', 'created', 'ttl', 'parked', 'held', 'holder',
  'lease', 'pool', 'obx')
if not f[1] or f[1] ~= ARGV[2] or f[2] ~= ARGV[3] then return {REPLY.NOT_FOUND} end
if f[3] ~= 'input_required' then return {REPLY.NOTHING} end
local box = outbox_of(f[11])
local wrong_outbox = other_outbox(KEYS[8], box)
if wrong_outbox then return wrong_outbox end
local now = now_ms()
-- A held question whose holder's lease lapsed cannot be answered any more (its session is
-- gone): nothing is taken, and the reaper fails the task.
if f[7] and (not f[8] or tonumber(f[9] or '0') <= now) then return {REPLY.NOTHING} end
-- A held task's answer goes to its holder, not to a queue; a parked one may be requeued.
if not f[7] then
  local wrong = other_pool(f[10], ARGV[7])
  if wrong then return wrong end
end
local applied = 0
for i = 9, #ARGV, 2 do
  if rcall('HDEL', inputs, ARGV[i]) == 1 then
    rcall('HSET', answers, ARGV[i], ARGV[i + 1])
    applied = applied + 1
  end
end
if applied == 0 then return {REPLY.NOTHING} end
rcall('PEXPIREAT', answers, tonumber(f[4]) + tonumber(f[5]))
local status, resumed, waited = 'input_required', 0, -1
if rcall('EXISTS', inputs) == 0 then
  status, resumed = 'working', 1
  waited = since(f[6], now)
  rcall('HSET', record, 'status', status, 'queued', now)
  if ARGV[5] ~= '' then rcall('HSET', record, 'msg', ARGV[5]) end
  if f[7] then
    rcall('HDEL', record, 'held')
    rcall('PUBLISH', ARGV[6] .. f[8], 'answered ' .. ARGV[1])
  else
    enqueue(stream, KEYS[6], KEYS[7], ARGV[1], f[1], tonumber(ARGV[8]))
  end
end
rcall('HSET', record, 'updated', now)
local ver = rcall('HINCRBY', record, 'ver', 1)
timeline(KEYS[5], now, {ev = 'answered', to = status, answers = applied})
announce(ARGV[4], KEYS[8], box, ARGV[1], ver, status, now, resumed == 1)
return {REPLY.OK, ver, resumed, waited}
