-- lease_requests: a slice of a tenant's fleet-wide request rate, leased by one gateway replica
-- to admit in memory (the GCRA of admit.lua, taken several cells at a time). Cells a replica
-- leased and did not use are given back first, moving the theoretical arrival time back (never
-- before now), so a replica that goes quiet does not keep its share. Nothing is written for a
-- refused lease that gives nothing back.
-- KEYS[1] requests: request-rate TAT
-- ARGV[1] interval (f64): ms between two requests (more than 0)
-- ARGV[2] burst (u32): requests allowed at once
-- ARGV[3] want (u64): cells asked for (0: only give back)
-- ARGV[4] unused (u64): cells of an earlier lease given back
-- Returns {1, granted} with 1 <= granted <= want | {0, retry_after_ms} none now (or want = 0).
local rcall = redis.call
local now = now_ms(true)
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local unused = tonumber(ARGV[4])

local stored = rcall('GET', KEYS[1])
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
  rcall('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
end
if granted >= 1 then return {REPLY.OK, granted} end
return {REPLY.NOTHING, math.max(1, math.ceil(tat + interval - interval * burst - now))}
