-- prelude: put before every script.
-- publish_event: a task's change event. A channel in a hash tag is a Cluster shard's own
-- (`SPUBLISH`: it stays on that shard's node); the one classic channel is used elsewhere.
local function publish_event(channel, message)
  if string.find(channel, '{', 1, true) then
    return redis.call('SPUBLISH', channel, message)
  end
  return redis.call('PUBLISH', channel, message)
end
