-- ack_hook: a deliverer's fenced write to one subscription: its acknowledged position, the
-- outcome of the last attempts, a dead letter, and the release of its lease. A stale fence
-- (or another holder, or no record) writes nothing (invariant 3).
-- KEYS[1] record: the subscription record
-- KEYS[2] dead: its dead letters
-- KEYS[3] index: the bucket's subscriptions, id -> lease expiry
-- ARGV[1] id: the subscription id
-- ARGV[2] holder: the deliverer
-- ARGV[3] fence (u64): its fencing token
-- ARGV[4] pos: the new acknowledged position ('' = unchanged)
-- ARGV[5] ok (u64): 1 when an event was accepted since the last write (clears the failure)
-- ARGV[6] error: the last failure's category ('' = none)
-- ARGV[7] letter: a dead letter, JSON ('' = none)
-- ARGV[8] counts (u64): 1 when the dead letter counts toward suspension
-- ARGV[9] suspend_after (u64): dead letters in a row that suspend
-- ARGV[10] release (u64): 1 to give the lease up (expiry 0: free to claim at once)
-- ARGV[11] park_ms (u64): with release, free to claim only this many ms from now (0 = at once)
-- Returns {1, active (0|1)} written | {-2} refused: stale fence, another holder, or gone.
local rcall = redis.call
local now = now_ms()
local f = rcall('HMGET', KEYS[1], 'holder', 'fence', 'exp')
if f[1] ~= ARGV[2] or tonumber(f[2] or '-1') ~= tonumber(ARGV[3]) then return {REPLY.LEASE_LOST} end
if ARGV[4] ~= '' then rcall('HSET', KEYS[1], 'pos', ARGV[4]) end
if ARGV[5] == '1' then
  rcall('HSET', KEYS[1], 'last_ok', now, 'dead_run', 0)
  rcall('HDEL', KEYS[1], 'last_err', 'failed_since')
end
if ARGV[6] ~= '' then
  rcall('HSET', KEYS[1], 'last_err', ARGV[6])
  if rcall('HEXISTS', KEYS[1], 'failed_since') == 0 then rcall('HSET', KEYS[1], 'failed_since', now) end
end
local active = 1
-- A letter equal to the newest one is the same write sent again after its reply was lost (the
-- deliverer keeps a letter until a write of it is confirmed): it is not counted twice.
if ARGV[7] ~= '' and rcall('LINDEX', KEYS[2], 0) ~= ARGV[7] then
  rcall('LPUSH', KEYS[2], ARGV[7])
  rcall('LTRIM', KEYS[2], 0, 99)
  local exp = tonumber(f[3] or '')
  if exp then rcall('PEXPIREAT', KEYS[2], exp) end
  if ARGV[8] == '1' then
    local run = rcall('HINCRBY', KEYS[1], 'dead_run', 1)
    if run >= tonumber(ARGV[9]) then
      rcall('HSET', KEYS[1], 'active', '0')
      if rcall('HEXISTS', KEYS[1], 'failed_since') == 0 then rcall('HSET', KEYS[1], 'failed_since', now) end
      active = 0
    end
  end
end
if ARGV[10] == '1' or active == 0 then
  rcall('HDEL', KEYS[1], 'holder')
  local free_at = tonumber(f[3] or '') or (now + 3600000)
  if active == 1 then
    local park = tonumber(ARGV[11])
    free_at = park > 0 and (now + park) or 0
  end
  rcall('ZADD', KEYS[3], free_at, ARGV[1])
end
return {REPLY.OK, active}
