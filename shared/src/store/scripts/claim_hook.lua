-- claim_hook: a deliverer claims one webhook subscription whose lease has run out (or that is
-- free): a larger fence, its holder, the lease expiry in the bucket's index (invariant 3).
-- One subscription a call (the ids come from the index, and no script builds a key); a
-- missing record leaves the index here, a suspended one is parked until its expiry.
-- KEYS[1] record: the subscription record
-- KEYS[2] index: the bucket's subscriptions, id -> lease expiry
-- ARGV[1] id: the subscription id
-- ARGV[2] holder: the deliverer
-- ARGV[3] lease_ms (u64): the lease
-- Returns {1, fence, principal, owner, url, name, args, secret, secret_old, old_until, pos,
--          exp, dead_run} claimed | {0} held by another, suspended or gone.
local rcall = redis.call
local now = now_ms()
local id = ARGV[1]
local lease = rcall('ZSCORE', KEYS[2], id)
if not lease then return {REPLY.NOTHING} end
if tonumber(lease) > now then return {REPLY.NOTHING} end
if rcall('EXISTS', KEYS[1]) == 0 then
  rcall('ZREM', KEYS[2], id)
  return {REPLY.NOTHING}
end
local f = rcall('HMGET', KEYS[1], 'active', 'exp', 'principal', 'owner', 'url', 'name', 'args', 'secret',
  'secret_old', 'old_until', 'pos', 'dead_run')
if f[1] ~= '1' then
  -- Suspended: no deliverer needs it until a refresh frees it again (or it expires).
  local until_ms = tonumber(f[2] or '') or (now + 3600000)
  rcall('ZADD', KEYS[2], until_ms, id)
  rcall('HDEL', KEYS[1], 'holder')
  return {REPLY.NOTHING}
end
local fence = rcall('HINCRBY', KEYS[1], 'fence', 1)
rcall('HSET', KEYS[1], 'holder', ARGV[2])
rcall('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)
return {REPLY.OK, fence, f[3] or '', f[4] or '', f[5] or '', f[6] or '', f[7] or '', f[8] or '', f[9] or '',
  tonumber(f[10] or '0') or 0, f[11] or '', tonumber(f[2] or '0') or 0, tonumber(f[12] or '0') or 0}
