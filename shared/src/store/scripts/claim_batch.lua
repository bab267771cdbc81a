-- claim_batch: fenced leases on the tasks at the front of a pool's fair ready set on each shard of
-- the batch, one per delivered wake-up entry, in fair order, in one run (docs/design.md, "Fair dispatch").
-- The claimer does not name a candidate: the script takes the front itself, so no claim is sent
-- again because another took the front first, and claims of one shard never race for a task.
-- At most as many tasks are taken as entries were still pending (one XACK for all of them says
-- how many, not which; fewer when fewer are queued), so the stream still holds at least one
-- entry per queued task: no task is ever left queued without a wake-up. Every entry handed in
-- is acked and deleted.
-- The record decides (invariant 1): only a `working` task with no holder is claimed; one that
-- is not (cancelled while queued) still leaves the ready set, for nothing, its entry spent.
-- An entry whose own task is `working`, unheld and not in the ready set was written before fair
-- dispatch existed (a rolling upgrade): it claims that task directly, taking nothing from the
-- ready set.
-- The task keys are derived here from the task ids and the layout in ARGV (`Keys::task_layout`),
-- not handed in KEYS: the ids are only known once the ready set is read, inside this script.
-- Every such key carries the shard's hash tag, so it is in the slot of the declared queue keys
-- (docs/architecture.md, invariant 2).
-- Idempotent for one (worker, first entry) on each shard: the run writes a receipt per shard
-- (expiring after a lease) naming what each of that shard's entries took; a re-sent batch whose
-- first run happened (its reply was lost) answers the claims that still hold from it instead of
-- taking more.
-- The claim raises each fencing token (as claim_task); it changes nothing a client sees.
-- One call may claim for several shards (the worker sends one shard's alone where a command
-- must keep to one slot, on a Cluster): each shard's deliveries take its own fair front, as if
-- sent alone.
-- KEYS[1..] shards: five per shard, in the order of the groups in ARGV: the pool's stream on the
--   shard (the entries' own), the shard's lease index, the pool's ready set on the shard, its
--   fairness tags, and this batch's receipt there (`Keys::claim_receipt`)
-- ARGV[1] worker: worker id   ARGV[2] lease_ms (u64): lease ms   ARGV[3] group: consumer group
-- ARGV[4] answers: answers key suffix   ARGV[5] steps: steps key suffix   ARGV[6] args: set-aside arguments key suffix
-- ARGV[7] timeline: timeline key suffix   ARGV[8] rel: related ids key suffix
-- ARGV[9..] groups (pairs): for each shard, in key order, its record key prefix (a record is
--   prefix .. id) and its number of entries, then that many pairs: each delivered entry id and
--   the task id it was written for, in stream order
-- Returns {1, claim…}: each claim an array laid out as claim_task's granted reply, then the
-- entry id and the task id; none when nothing was claimable.
local rcall = redis.call
local worker, lease_ms, group = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local EMPTY = {}
local out = {REPLY.OK}
local now = now_ms()
local lease_until = now + lease_ms

-- One shard's deliveries: `stream`, `leases`, `ready`, `fair`, `receipt` its keys, `prefix` its
-- records' key prefix, `entries` and `own` the delivered entry ids and their tasks' ids.
local function claim_shard(stream, leases, ready, fair, receipt, prefix, entries, own)
  local function read(id)
    return rcall('HMGET', prefix .. id, 'status', 'holder', 'tool', 'args', 'tp', 'cancel', 'caps', 'tenant', 'entry',
      'fence', 'tstate', 'capx', 'queued', 'principal', 'x')
  end
  -- What a claim reads beside the record, only where there can be something: the record's `x`
  -- (create_task) says what its create kept. Before a first run (token 0) answers and steps can
  -- only be the create's; a later run reads them always. A record without `x` reads everything.
  local function beside(f, record, key, bit, first_only)
    local x = tonumber(f[15] or '')
    if x and (first_only == false or f[10] == '0') and math.floor(x / bit) % 2 == 0 then return EMPTY end
    return rcall(key == ARGV[8] and 'GET' or 'HGETALL', record .. key)
  end
  local function granted(entry, id, f, fence)
    local record = prefix .. id
    local related = beside(f, record, ARGV[8], 4, false)
    return {REPLY.OK, fence, f[3], from_aside(f[4], record .. ARGV[6]), f[5] or '', f[6] and 1 or 0,
      beside(f, record, ARGV[4], 1, true), f[7] or '{}', f[11] or '', f[12] or '0', beside(f, record, ARGV[5], 2, true),
      f[13] or '', f[8] or '', f[14] or '', related ~= EMPTY and related or '', entry, id}
  end
  local done = rcall('GET', receipt)
  if done then
    -- A replay: answer what the first run took and still holds, take nothing more.
    local i = 0
    for id in string.gmatch(done, '%S+') do
      i = i + 1
      if id ~= '-' then
        local f = read(id)
        if f[1] == 'working' and f[2] == worker and f[9] == entries[i] then
          out[#out + 1] = granted(entries[i], id, f, tonumber(f[10]))
        end
      end
    end
    return
  end
  local k = #entries
  if k == 0 then return end
  -- Only an entry still pending takes a task: one acked already (taken over and claimed by
  -- another worker, say) was spent by that claim. All are acked in one call, which says how
  -- many were pending, not which: when some were not, at most that many tasks are taken from
  -- the front, and an entry that would claim its own task directly (below) is taken as pending,
  -- since one more task claimed than entries spent never leaves a task without a wake-up.
  local pending = rcall('XACK', stream, group, unpack(entries))
  local live = {}
  for i = 1, k do live[i] = pending > 0 end
  -- (ZRANGE 0 -1 would read the whole set.)
  local front = pending > 0 and rcall('ZRANGE', ready, 0, pending - 1, 'WITHSCORES') or {}
  local at_front = {}
  for i = 1, #front, 2 do at_front[front[i]] = true end
  -- Entries that claim their own task directly (queued before fair dispatch); the others take
  -- the front in turn.
  local direct, wanted = {}, 0
  for i = 1, k do
    local id = own[i]
    if live[i] and not at_front[id] and not rcall('ZSCORE', ready, id) then
      local f = rcall('HMGET', prefix .. id, 'status', 'holder')
      direct[i] = f[1] == 'working' and not f[2]
    end
    if live[i] and not direct[i] then wanted = wanted + 1 end
  end
  local taken = {}
  for j = 1, math.min(wanted, pending, #front / 2) do taken[j] = front[2 * j - 1] end
  if #taken > 0 then rcall('ZREM', ready, unpack(taken)) end
  local took, indexed, tenants, j = {}, {}, {}, 0
  for i = 1, k do
    local id
    if direct[i] then
      id = own[i]
    elseif live[i] then
      j = j + 1
      id = taken[j]
    end
    took[i] = '-'
    if id then
      local f = read(id)
      if not direct[i] and f[8] then tenants[f[8]] = true end
      if f[1] == 'working' and not f[2] then
        -- As claim_task: the claim's time, or one more than the last token if that is later.
        local fence = math.max(tonumber(f[10] or '0') + 1, now)
        local record = prefix .. id
        rcall('HSET', record, 'fence', string.format('%.0f', fence), 'holder', worker, 'lease', lease_until,
          'entry', entries[i], 'claimed', now)
        indexed[#indexed + 1] = lease_until
        indexed[#indexed + 1] = id
        timeline(record .. ARGV[7], now, {ev = 'claimed', to = 'working', fence = fence, holder = worker})
        out[#out + 1] = granted(entries[i], id, f, fence)
        took[i] = id
      end
    end
  end
  -- Once for the shard: the floor moves to the last tag taken.
  if #taken > 0 then drop_spent_tags(ready, fair, front[2 * #taken], tenants) end
  if #indexed > 0 then rcall('ZADD', leases, unpack(indexed)) end
  rcall('XDEL', stream, unpack(entries))
  rcall('SET', receipt, table.concat(took, ' '), 'PX', lease_ms)
end

local at, shard = 9, 0
while at <= #ARGV do
  local prefix, count = ARGV[at], tonumber(ARGV[at + 1])
  if not count or at + 1 + 2 * count > #ARGV then
    return redis.error_reply('ERR claim_batch: a group of entries runs past the arguments')
  end
  local base = 5 * shard
  if base + 5 > #KEYS then return redis.error_reply('ERR claim_batch: a group of entries has no keys') end
  local entries, own = {}, {}
  for i = at + 2, at + 1 + 2 * count, 2 do
    entries[#entries + 1] = ARGV[i]
    own[#own + 1] = ARGV[i + 1]
  end
  claim_shard(KEYS[base + 1], KEYS[base + 2], KEYS[base + 3], KEYS[base + 4], KEYS[base + 5], prefix, entries, own)
  at = at + 2 + 2 * count
  shard = shard + 1
end
return out
