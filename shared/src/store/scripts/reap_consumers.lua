-- reap_consumers: deletes consumers of the worker group on one shard stream that have nothing
-- pending: this worker's own on a clean exit, and any other idle for at least ARGV[2] ms (a
-- dead worker's; a live one that was only idle is recreated by its next read). A consumer with
-- pending entries is kept: deleting it would drop those entries from the pending list, and
-- nothing would ever deliver them again. Checked and deleted in one script, so no read can
-- deliver to a consumer between the check and the delete.
-- KEYS[1] stream: shard stream
-- ARGV[1] group: consumer group   ARGV[2] min_idle_ms (u64): minimum idle ms for others
-- ARGV[3] own: this worker's consumer ('' = none)
-- Returns the number of consumers deleted.
local rcall = redis.call
local stream, group = KEYS[1], ARGV[1]
if rcall('EXISTS', stream) == 0 then return 0 end
local ok, consumers = pcall(rcall, 'XINFO', 'CONSUMERS', stream, group)
if not ok then return 0 end
local min_idle = tonumber(ARGV[2])
local deleted = 0
for _, c in ipairs(consumers) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  local own = f['name'] == ARGV[3]
  if tonumber(f['pending']) == 0 and (own or tonumber(f['idle']) >= min_idle) then
    rcall('XGROUP', 'DELCONSUMER', stream, group, f['name'])
    deleted = deleted + 1
  end
end
return deleted
