-- create_task: write a new task record and enqueue it on its shard, atomically.
-- Invariants: the record and its queue entry appear together or not at all; the record
-- expires at createdAt + ttl (PEXPIREAT), which nothing extends.
-- KEYS[1] record: task record (hash)      KEYS[2] stream: the dispatch stream of the task's pool on its shard
-- KEYS[3] answers: answers hash
-- KEYS[4] timeline: timeline (list)   KEYS[5] index: the shard's task index   KEYS[6] tenant_index: the shard's index of the tenant
--   (sorted sets: task id -> expiry ms; what the operator console lists; readers skip entries
--   whose record has expired)
-- KEYS[7] ready: the pool's ready set on the shard   KEYS[8] fair: its fairness tags (prelude: enqueue)
-- KEYS[9] args: the task's arguments when too long for the record (prelude: aside)
-- KEYS[10] steps: the task's durable steps hash
-- KEYS[11] outbox: the owner's outbox on the shard (prelude: announce)
-- ARGV[1] task id   ARGV[2] tenant   ARGV[3] principal   ARGV[4] tool   ARGV[5] arguments JSON
-- ARGV[6] ttl ms    ARGV[7] poll interval ms   ARGV[8] status message ('' = none)
-- ARGV[9] traceparent ('' = none)   ARGV[10] events channel
-- ARGV[11] the creating request's clientCapabilities JSON
-- ARGV[12] '1' when the task counts against its tenant's active-task cap, else '0' 
-- ARGV[13] the tool's saved state to start from ('' = none): an inline call resumed by an MRTR
--   retry carries the state its earlier run parked with
-- ARGV[14] '1' when the Tasks extension's declaration was left out of ARGV[11] (store/compact.rs)
-- ARGV[15] '1' to keep the task's history for the operator console: its timeline (which every
--   later transition appends to, RPUSHX: only where it exists) and its index entries
-- ARGV[16] the worker pool the task is queued for (KEYS[2] is its queue); kept in the record, so
--   every later requeue goes to the same pool's queue
-- ARGV[17] the idempotency fingerprint ('' = the client sent no key): a digest of the tool and
--   its arguments, kept in the record; the id itself was derived from the key
-- ARGV[18] the tenant's weight (its share of the pool when several tenants have tasks queued)
-- ARGV[19] the record's `obx` for a tenant with events on ('' = none): "<owner digest>
--   <retention ms> <cap>" (prelude: outbox_of); KEYS[11] is then that owner's outbox
-- ARGV[20] '1' when related task ids were kept beside the task (its `rel` key) before this create
-- ARGV[21] n, the number of durable steps recorded before the task existed: an inline call's
--   earlier round recorded them and parked for input; the retry's run replays them
-- ARGV[22..21+2n] step name, result JSON pairs
-- ARGV[22+2n..] key, answer JSON pairs recorded before the task existed (MRTR rounds)
-- Returns {1, createdAtMs} a new task | {2, createdAtMs, '1' if it has ended else '0'} the task
--         this owner made with this id before (a replay: nothing changed, nothing published)
--       | {-6} the id exists for another owner or tool
--       | {-7} a keyed create whose key made this task for another tool or other arguments.
-- Idempotent: the same owner repeating the same id for the same tool (a create re-sent after
-- its reply was lost, or a client's retry with the same idempotency key) gets the task it
-- made, unchanged, instead of an error it would retry into a duplicate.
-- Publishes "<id> 1 working" on ARGV[10] (and appends it to the outbox: prelude, announce).
local rcall = redis.call
local record, stream, answers = KEYS[1], KEYS[2], KEYS[3]
local existing = rcall('HMGET', record, 'tenant', 'principal', 'tool', 'created', 'idem', 'status')
if existing[1] then
  local keyed = ARGV[17] ~= ''
  if keyed and existing[1] == ARGV[2] and existing[2] == ARGV[3]
      and (existing[3] ~= ARGV[4] or existing[5] ~= ARGV[17]) then
    return {-7}
  end
  if existing[1] == ARGV[2] and existing[2] == ARGV[3] and existing[3] == ARGV[4] then
    -- Write something all the same (the value it already has): a WAIT behind this re-send,
    -- on a fresh connection, must have a write to count, and replication is ordered, so a
    -- replica that has this one has the original create too.
    rcall('HSET', record, 'created', existing[4])
    local ended = existing[6] ~= 'working' and existing[6] ~= 'input_required'
    return {2, tonumber(existing[4]), ended and '1' or '0'}
  end
  return {-6}
end
local now = now_ms()
-- One HSET with the optional fields folded in: each command inside a script costs Redis a call.
local fields = {'tenant', ARGV[2], 'principal', ARGV[3], 'tool', ARGV[4],
  'args', aside(KEYS[9], ARGV[5], now + tonumber(ARGV[6])),
  'status', 'working', 'created', now, 'updated', now, 'ttl', ARGV[6], 'poll', ARGV[7],
  'ver', 1, 'fence', 0, 'caps', ARGV[11], 'pool', ARGV[16], 'queued', now}
local function optional(field, value)
  if value ~= '' then fields[#fields + 1] = field; fields[#fields + 1] = value end
end
optional('msg', ARGV[8])
optional('tp', ARGV[9])
optional('tstate', ARGV[13])
optional('idem', ARGV[17])
optional('obx', ARGV[19])
-- Fields whose value would be the default are left out, to keep the record small: `reclaims`
-- (absent: 0, and HINCRBY starts from nothing) and `counted` (absent: not counted).
if ARGV[12] == '1' then optional('counted', '1') end
if ARGV[14] == '1' then optional('capx', '1') end
-- `x`: what a first claim must read beside the record (1 answers, 2 steps, 4 related ids), so
-- that it reads nothing for the usual task that has none. Written always: a record without it
-- (made before it existed) has every read done.
local answered = #ARGV >= 22 + 2 * tonumber(ARGV[21])
fields[#fields + 1] = 'x'
fields[#fields + 1] = (answered and 1 or 0) + (ARGV[21] ~= '0' and 2 or 0) + (ARGV[20] == '1' and 4 or 0)
rcall('HSET', record, unpack(fields))
rcall('PEXPIREAT', record, now + tonumber(ARGV[6]))
local carried = 22 + 2 * tonumber(ARGV[21])
if carried > 22 then
  for i = 22, carried - 1, 2 do rcall('HSET', KEYS[10], ARGV[i], ARGV[i + 1]) end
  rcall('PEXPIREAT', KEYS[10], now + tonumber(ARGV[6]))
end
if #ARGV >= carried then
  for i = carried, #ARGV, 2 do rcall('HSET', answers, ARGV[i], ARGV[i + 1]) end
  rcall('PEXPIREAT', answers, now + tonumber(ARGV[6]))
end
if ARGV[15] == '1' then
  local expires = now + tonumber(ARGV[6])
  rcall('RPUSH', KEYS[4], cjson.encode({at = now, ev = 'created', to = 'working'}))
  rcall('PEXPIREAT', KEYS[4], expires)
  for i = 5, 6 do
    rcall('ZADD', KEYS[i], expires, ARGV[1])
    -- The index itself expires with its newest task, so one a tenant stopped using goes away.
    rcall('PEXPIREAT', KEYS[i], expires, 'NX')
    rcall('PEXPIREAT', KEYS[i], expires, 'GT')
  end
  -- Expired tasks leave the indexes here, on one create in 16 (ids end in a random hex digit):
  -- an index then holds its live tasks and a few creates' worth of expired ones, for two
  -- commands on a sixteenth of creates instead of on every one.
  if string.sub(ARGV[1], -1) == '0' then
    rcall('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
    rcall('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  end
end
enqueue(stream, KEYS[7], KEYS[8], ARGV[1], ARGV[2], tonumber(ARGV[18]))
announce(ARGV[10], KEYS[11], outbox_of(ARGV[19] ~= '' and ARGV[19] or nil), ARGV[1], 1, 'working', now, true)
return {REPLY.OK, now}
