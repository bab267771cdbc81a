-- prelude: put before every script.
-- publish_event: a task's change event. A channel in a hash tag is a Cluster shard's own
-- (`SPUBLISH`: it stays on that shard's node); the one classic channel is used elsewhere.
local function publish_event(channel, message)
  if string.find(channel, '{', 1, true) then
    return redis.call('SPUBLISH', channel, message)
  end
  return redis.call('PUBLISH', channel, message)
end
-- other_pool: a script that enqueues a task is handed one pool's queue as a declared key and
-- that pool's name; when the record belongs to another pool (a record without `pool` is the
-- `default` pool's, from before pools existed) it writes nothing and names the record's pool,
-- so the caller sends it again with that pool's queue declared. Returns nil when they agree.
local function other_pool(recorded, declared)
  local pool = recorded or 'default'
  if pool ~= declared then return {-10, pool} end
  return nil
end
-- timeline: appends one transition to a task's timeline, a list made with the record by
-- create_task and expiring with it. RPUSHX: a task made before timelines existed gets none,
-- rather than a list that never expires. Fields: at (ms), ev (what happened), to (the status
-- after it), fence and holder (the run), by and why (an operator's action).
local function timeline(key, at, fields)
  fields.at = at
  return redis.call('RPUSHX', key, cjson.encode(fields))
end
