-- lease_requests: slices of tenants' fleet-wide request rates, leased by one gateway replica to
-- admit in memory (the GCRA of admit.lua, taken several cells at a time), one per key: the
-- tenant whose slice ran dry and, in the same call, others of the replica whose slices are
-- nearly spent, so that a replica's tenants cost Redis one call together rather than one each.
-- Cells a replica leased and did not use are given back first, moving the theoretical arrival
-- time back (never before now), so a replica that goes quiet does not keep its share. Nothing
-- is written for a refused lease that gives nothing back. Redis's clock is read once.
-- KEYS[1..] requests: each tenant's request-rate TAT
-- Arguments, four for each key in the order of the keys: the ms between two requests (more
-- than 0), the requests allowed at once (burst), the cells asked for (0: only give back) and
-- the cells of an earlier lease given back.
-- Returns {1, lease…}: for each key, {1, granted} with 1 <= granted <= asked, or
-- {0, retry_after_ms} when none fits now (or none was asked).
local rcall = redis.call
local now = now_ms(true)
local out = {REPLY.OK}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[4 * i - 3])
  local burst = tonumber(ARGV[4 * i - 2])
  local want = tonumber(ARGV[4 * i - 1])
  local unused = tonumber(ARGV[4 * i])
  if not (interval and burst and want and unused) or interval <= 0 then
    return redis.error_reply('ERR lease_requests: four arguments for each key, the interval above 0')
  end
  local stored = rcall('GET', key)
  local tat = tonumber(stored or now)
  if tat < now then tat = now end
  local moved = false
  if unused > 0 and stored then
    tat = math.max(now, tat - unused * interval)
    moved = true
  end
  -- k cells fit while tat + k * interval - interval * burst <= now.
  local fits = math.floor((now - tat) / interval + burst + 1e-9)
  local granted = math.min(want, fits)
  if granted >= 1 then
    tat = tat + granted * interval
    moved = true
  end
  if moved then
    rcall('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
  end
  if granted >= 1 then
    out[#out + 1] = {REPLY.OK, granted}
  else
    out[#out + 1] = {REPLY.NOTHING, math.max(1, math.ceil(tat + interval - interval * burst - now))}
  end
end
return out
