-- prelude: the helpers the scripts share. Each script is sent with the definitions here that it
-- names (and those they name), picked by shared/build.rs: a definition starts at a comment line,
-- or a `local` at the start of a line, that follows code.
-- REPLY: the reply codes several scripts share (a reply's first element); the same values as
-- `code` in shared/src/store/reply.rs, which a unit test holds equal. A script's own codes are
-- literals, listed in its header.
local REPLY = {
  NOTHING = 0, OK = 1, NOT_FOUND = -1, LEASE_LOST = -2, KEY_REUSED = -5, OTHER_POOL = -10, OTHER_OUTBOX = -11,
  CANCELLED = 3, FAILED = 4, ALREADY_ENDED = 5,
}
-- now_ms: Redis's clock in milliseconds, whole as every record stores it, or with the
-- microseconds as a fraction when `exact` (the rate limiter's arithmetic wants them).
local function now_ms(exact)
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  return tonumber(t[1]) * 1000 + (exact and us / 1000 or math.floor(us / 1000))
end
-- since: the milliseconds from `at` (a time the record holds, as text; nil when it holds none)
-- to `now`, or -1 when there is no `at`: how long a task has been in a state, for its metrics.
local function since(at, now)
  if not at then return -1 end
  return now - tonumber(at)
end
-- publish_event: a task's change event. A channel in a hash tag is a Cluster shard's own
-- (`SPUBLISH`: it stays on that shard's node); the one classic channel is used elsewhere.
local function publish_event(channel, message)
  if string.find(channel, '{', 1, true) then
    return redis.call('SPUBLISH', channel, message)
  end
  return redis.call('PUBLISH', channel, message)
end
-- The outbox (docs/events.md, 2.3). A task of a tenant with events on has `obx` in its record,
-- written by create_task: "<owner digest> <retention ms> <cap>", the owner's outbox (a stream
-- per shard and owner) and how long and how far it is kept. Every script that changes the
-- task's status appends one entry there (announce), in the same script as the change.
-- outbox_of: the record's `obx` read apart; nil for a task without one (it pays nothing).
local function outbox_of(obx)
  if not obx then return nil end
  local owner, retention, cap = string.match(obx, '^(%x+) (%d+) (%d+)$')
  if not owner then return nil end
  return {owner = owner, retention = tonumber(retention), cap = tonumber(cap)}
end
-- other_outbox: a script is handed its outbox as a declared key (invariant 2: no script builds
-- a key, but for the batch scripts, which derive it in the shard's slot); a caller that does
-- not know the owner (the reaper) declares the shard's placeholder.
-- When the record's outbox is not the declared key the script writes nothing and names the
-- owner, and the caller sends it again with that key. Returns nil when they agree (or there is
-- no outbox). Call it before the first write.
local function other_outbox(declared, box)
  if box and string.sub(declared, -(#box.owner + 1)) ~= ':' .. box.owner then
    return {REPLY.OTHER_OUTBOX, box.owner}
  end
  return nil
end
-- announce: a task's change, published ("<id> <version> <status>", with the owner digest as a
-- fourth word when it has an outbox, which readers of three words ignore) and, when the status
-- changed (`changed`) and the record has an outbox (`box`), appended to it: `t` id, `s` status,
-- `v` version, `u` updated (ms). Trimmed at each append: MINID ~ now - retention, and MAXLEN ~
-- cap once over it; the stream lives for twice the retention after its last append.
local function announce(channel, outbox, box, id, ver, status, now, changed)
  local message = id .. ' ' .. ver .. ' ' .. status
  if box then
    message = message .. ' ' .. box.owner
    if changed then
      redis.call('XADD', outbox, 'MINID', '~', tostring(math.max(now - box.retention, 0)), '*',
        't', id, 's', status, 'v', ver, 'u', now)
      if redis.call('XLEN', outbox) > box.cap then redis.call('XTRIM', outbox, 'MAXLEN', '~', box.cap) end
      redis.call('PEXPIRE', outbox, 2 * box.retention)
    end
  end
  return publish_event(channel, message)
end
-- other_pool: a script that enqueues a task is handed one pool's queue as a declared key and
-- that pool's name; when the record belongs to another pool (a record without `pool` is the
-- `default` pool's, from before pools existed) it writes nothing and names the record's pool,
-- so the caller sends it again with that pool's queue declared. Returns nil when they agree.
local function other_pool(recorded, declared)
  local pool = recorded or 'default'
  if pool ~= declared then return {REPLY.OTHER_POOL, pool} end
  return nil
end
-- timeline: appends one transition to a task's timeline, a list made with the record by
-- create_task and expiring with it. RPUSHX: a task made before timelines existed (or while the
-- console was off) gets none, rather than a list that never expires; returns the list's length,
-- 0 when nothing was written. Fields: at (ms), ev (what happened), to (the status after it),
-- fence and holder (the run), by and why (an operator's action). Bounded: past TIMELINE_MAX
-- entries the oldest go (LTRIM only then), so nothing repeated (a client's cancels of a running
-- task, an operator's reveals) grows a task's keys without bound.
local TIMELINE_MAX = 200
local function timeline(key, at, fields)
  fields.at = at
  local length = redis.call('RPUSHX', key, cjson.encode(fields))
  if length > TIMELINE_MAX then redis.call('LTRIM', key, -TIMELINE_MAX, -1) end
  return length
end
-- enqueue: queues a task for its pool on its shard (docs/design.md, "Fair dispatch": start-time
-- fair queuing). A new run (`weight` given: its tenant's share; a created task, or an answered
-- one, whose next run the tenant chose to start) is tagged one step of 1/weight after its
-- tenant's last queued task, but never from below the floor (the tag of the task taken last):
-- a tenant with nothing queued starts at the front, one with a backlog queues behind its own.
-- A released or reclaimed task (`weight` nil) goes to the front, at the floor, its tenant's tag
-- unmoved: its run was claimed in its fair turn and cut short by a worker, not by its tenant,
-- so it is not charged twice (and reclaims are capped). One wake-up entry goes on the stream
-- either way; a claim consumes one entry per task it takes.
local function enqueue(stream, ready, fair, id, tenant, weight)
  local tag
  if weight then
    local f = redis.call('HMGET', fair, 'floor', 't:' .. tenant)
    tag = math.max(tonumber(f[1] or '0'), tonumber(f[2] or '0')) + 1 / weight
    redis.call('HSET', fair, 't:' .. tenant, tag)
  else
    tag = tonumber(redis.call('HGET', fair, 'floor') or '0')
  end
  redis.call('ZADD', ready, tag, id)
  redis.call('XADD', stream, '*', 'id', id)
end
-- Values set aside: a task's arguments, `result` or `error` longer than a compact hash value
-- (64 bytes, Redis's default hash-max-listpack-value) is kept in a key of its own beside the
-- record (`:args`, `:out`), with ASIDE in the record in its place. One long value would turn the
-- whole record from a listpack into a hashtable, about twice the memory. No JSON text starts
-- with '@', so the marker is never a value.
local ASIDE = '@aside'
-- aside: what the record should hold for `value`: the value itself when short, else ASIDE,
-- the value going into `key`, which expires with the record (at `expires_at`, ms).
local function aside(key, value, expires_at)
  if #value <= 64 then return value end
  redis.call('SET', key, value)
  redis.call('PEXPIREAT', key, expires_at)
  return ASIDE
end
-- from_aside: a value read from a record, put back from `key` when it was set aside.
local function from_aside(value, key)
  if value == ASIDE then return redis.call('GET', key) end
  return value
end
-- drop_spent_tags: after claims took tasks from `ready` up to the tag `floor`, moves the floor
-- of `fair` there and forgets tags that say nothing any more; `tenants` is a set (name ->
-- true) of the tenants whose tasks were taken. With nothing left queued every tag is spent and
-- the next enqueue starts afresh. A tag at or below the floor is one (an enqueue starts from
-- max(floor, tag)), and a tenant's tag is its last queued task's, so the claim of that task
-- drops it: a cancelled task's included, whose record still names the tenant. `fair` then
-- holds the floor and a tag per tenant with a task queued above it, however long the ready set
-- stays non-empty. Only a record gone while queued (expired, or evicted) names no tenant,
-- leaving its tag behind; since the tags above the floor are at most one per queued task, a
-- hash grown past twice the queued tasks is mostly such leftovers, and all of them are swept
-- out. Each sweep deletes at least half of what it reads: over time a constant cost per
-- enqueue.
local function drop_spent_tags(ready, fair, floor, tenants)
  local queued = redis.call('ZCARD', ready)
  if queued == 0 then
    redis.call('DEL', fair)
    return
  end
  local spent = tonumber(floor)
  redis.call('HSET', fair, 'floor', floor)
  for tenant in pairs(tenants) do
    local tag = redis.call('HGET', fair, 't:' .. tenant)
    if tag and tonumber(tag) <= spent then redis.call('HDEL', fair, 't:' .. tenant) end
  end
  if redis.call('HLEN', fair) <= 2 * queued + 1 then return end
  local fields, gone = redis.call('HGETALL', fair), {}
  for i = 1, #fields, 2 do
    if fields[i] ~= 'floor' and tonumber(fields[i + 1]) <= spent then gone[#gone + 1] = fields[i] end
  end
  -- In slices: one call's arguments are bounded by Lua's stack.
  for i = 1, #gone, 1000 do redis.call('HDEL', fair, unpack(gone, i, math.min(i + 999, #gone))) end
end
-- finish_one: the lease holder writes a task's outcome (finish_task, and finish_batch for many
-- tasks at once; finish_task's header says what it writes and answers). `k` holds the task's
-- keys: record, leases, inputs, timeline, outcome, and either `outbox` (a declared key,
-- checked against the record's: other_outbox) or `outbox_prefix` (the shard's outbox key
-- before the owner, for a caller handing task ids rather than keys: the record's owner
-- completes it, in the shard's hash tag). `now`: Redis's clock, read once for a batch (nil:
-- read here).
local function finish_one(k, id, worker, fence, status, field, payload, message, events, now)
  local record = k.record
  local f = redis.call('HMGET', record, 'status', 'holder', 'fence', 'ver', 'finisher', 'held', 'created', 'ttl',
    'tenant', 'counted', 'claimed', 'obx', 'parked')
  local slot = f[10] and f[9] or ''
  if f[1] == status and f[5] == worker and f[3] == fence then return {REPLY.OK, tonumber(f[4]), slot, -1} end
  if (f[1] ~= 'working' and not (f[1] == 'input_required' and f[6])) or f[2] ~= worker or f[3] ~= fence then
    return {REPLY.LEASE_LOST}
  end
  local box = outbox_of(f[12])
  local outbox = k.outbox
  if outbox then
    local wrong_outbox = other_outbox(outbox, box)
    if wrong_outbox then return wrong_outbox end
  elseif box then
    outbox = k.outbox_prefix .. box.owner
  end
  now = now or now_ms()
  -- What only a queued or running task needs goes with its end (a smaller record for its TTL).
  redis.call('HDEL', record, 'holder', 'lease', 'held', 'entry', 'queued', 'claimed', 'x')
  redis.call('ZREM', k.leases, id)
  -- Only a run that asked for input (`parked`, never removed) can have left open questions.
  if f[13] then redis.call('DEL', k.inputs) end
  -- One HSET for every field the end writes, the version included (read above, in this same
  -- script, so nothing can move it between): each command inside a script costs Redis a call.
  local ver = tonumber(f[4] or '0') + 1
  local fields = {'finisher', worker, 'status', status, 'updated', now, 'ver', ver}
  if field ~= '' then
    fields[#fields + 1] = field
    fields[#fields + 1] = aside(k.outcome, payload, tonumber(f[7]) + tonumber(f[8]))
  end
  if message ~= '' then
    fields[#fields + 1] = 'msg'
    fields[#fields + 1] = message
  end
  redis.call('HSET', record, unpack(fields))
  timeline(k.timeline, now, {ev = 'finished', to = status, fence = tonumber(fence), holder = worker})
  announce(events, outbox, box, id, ver, status, now, true)
  return {REPLY.OK, ver, slot, since(f[11], now)}
end
