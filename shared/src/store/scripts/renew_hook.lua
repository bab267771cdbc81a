-- renew_hook: a deliverer extends its lease on one subscription, only while its fence and
-- holder are the record's (invariants 3 and 12).
-- KEYS[1] record: the subscription record
-- KEYS[2] index: the bucket's subscriptions, id -> lease expiry
-- ARGV[1] id: the subscription id
-- ARGV[2] holder: the deliverer
-- ARGV[3] fence (u64): its fencing token
-- ARGV[4] lease_ms (u64): the lease
-- Returns {1, secret, secret_old, old_until} renewed (the secrets as they are now, so a refresh's
--       new secret reaches the holder) | {-2} lost (another holder, a newer fence, or gone).
local rcall = redis.call
local f = rcall('HMGET', KEYS[1], 'holder', 'fence', 'active', 'secret', 'secret_old', 'old_until')
if f[1] ~= ARGV[2] or tonumber(f[2] or '-1') ~= tonumber(ARGV[3]) then return {REPLY.LEASE_LOST} end
if f[3] ~= '1' then return {REPLY.LEASE_LOST} end
rcall('ZADD', KEYS[2], now_ms() + tonumber(ARGV[4]), ARGV[1])
return {REPLY.OK, f[4] or '', f[5] or '', tonumber(f[6] or '0') or 0}
