-- upsert_hook: creates or refreshes a webhook subscription (docs/events.md, 2.8), atomically
-- with its caps. A refresh replaces the secret (the old one kept for the rotation grace),
-- grants the TTL again and resumes a suspended subscription; its position stays, unless it
-- has none. Expired ids are dropped from the cap sets before they are counted.
-- KEYS[1] record: the subscription record
-- KEYS[2] index: the bucket's subscriptions, id -> lease expiry
-- KEYS[3] tenant: the tenant's subscription ids -> expiry
-- KEYS[4] principal: the principal's subscription ids -> expiry
-- KEYS[5] verified: the verified (principal, url) marker
-- KEYS[6] dead: the subscription's dead letters
-- ARGV[1] id: the subscription id
-- ARGV[2] principal: the caller, "tenant/principal" escaped
-- ARGV[3] owner: the caller's owner digest
-- ARGV[4] url: the callback URL
-- ARGV[5] name: the event type
-- ARGV[6] args: the subscription arguments, canonical JSON
-- ARGV[7] secret: the sealed secret (JSON)
-- ARGV[8] ttl_ms (u64): the granted lifetime; 0 = no expiry
-- ARGV[9] pos: the position a new subscription starts at ('' = none known)
-- ARGV[10] max_principal (u64): the principal's cap
-- ARGV[11] max_tenant (u64): the tenant's cap
-- ARGV[12] verified_ttl_ms (u64): how long the verification is kept; 0 = do not record one
-- ARGV[13] grace_ms (u64): how long the replaced secret still signs
-- Returns {1, created (0|1), exp (0 = none), pos, was_active, last_ok, last_err, failed_since}
--       | {-25, limit ("principal"|"tenant"), max}.
local rcall = redis.call
local now = now_ms()
local id = ARGV[1]
local ttl = tonumber(ARGV[8])
local exp = 0
if ttl > 0 then exp = now + ttl end
local score = exp
if exp == 0 then score = '+inf' end
local existed = rcall('EXISTS', KEYS[1]) == 1
if not existed then
  rcall('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  rcall('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if rcall('ZSCORE', KEYS[4], id) == false and rcall('ZCARD', KEYS[4]) >= tonumber(ARGV[10]) then
    return {-25, 'principal', tonumber(ARGV[10])}
  end
  if rcall('ZSCORE', KEYS[3], id) == false and rcall('ZCARD', KEYS[3]) >= tonumber(ARGV[11]) then
    return {-25, 'tenant', tonumber(ARGV[11])}
  end
end
local old = rcall('HMGET', KEYS[1], 'secret', 'pos', 'active', 'last_ok', 'last_err', 'failed_since')
local pos = old[2]
if not pos or pos == '' then pos = ARGV[9] end
local was_active = old[3] or '1'
if existed and old[1] and old[1] ~= ARGV[7] then
  rcall('HSET', KEYS[1], 'secret_old', old[1], 'old_until', now + tonumber(ARGV[13]))
end
rcall('HSET', KEYS[1], 'principal', ARGV[2], 'owner', ARGV[3], 'url', ARGV[4], 'name', ARGV[5],
  'args', ARGV[6], 'secret', ARGV[7], 'pos', pos, 'active', '1', 'dead_run', 0)
if not existed then
  rcall('HSET', KEYS[1], 'created', now, 'fence', 0)
end
if was_active ~= '1' then
  -- A resumed subscription's failure run starts again.
  rcall('HDEL', KEYS[1], 'failed_since')
end
if exp > 0 then
  rcall('HSET', KEYS[1], 'exp', exp)
  rcall('PEXPIREAT', KEYS[1], exp)
  if rcall('EXISTS', KEYS[6]) == 1 then rcall('PEXPIREAT', KEYS[6], exp) end
else
  rcall('HDEL', KEYS[1], 'exp')
  rcall('PERSIST', KEYS[1])
  rcall('PERSIST', KEYS[6])
end
rcall('ZADD', KEYS[3], score, id)
rcall('ZADD', KEYS[4], score, id)
-- A new or resumed subscription is free to claim at once; a held one keeps its lease.
local lease = rcall('ZSCORE', KEYS[2], id)
if not lease or was_active ~= '1' then rcall('ZADD', KEYS[2], 0, id) end
if tonumber(ARGV[12]) > 0 then
  rcall('SET', KEYS[5], '1', 'PX', ARGV[12])
end
local created = 0
if not existed then created = 1 end
return {REPLY.OK, created, exp, pos, was_active, old[4] or '', old[5] or '', old[6] or ''}
