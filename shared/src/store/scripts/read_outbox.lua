-- read_outbox: reads one owner's outbox on one shard after a position (docs/events.md, 2.4, 2.6):
-- events/poll, and whoever follows an owner's events. Reads only: it writes nothing.
-- KEYS[1] outbox: the owner's outbox on the shard
-- ARGV[1] after: the position read from, a stream id (exclusive)
-- ARGV[2] drained: '1' when that position was the stream's end when the cursor was made
-- ARGV[3] made (u64): when the cursor was made (Redis ms)
-- ARGV[4] retention (u64): the outbox retention (ms); a stream lives twice that after its last
--   append
-- ARGV[5] max_age (u64): read nothing older than this many ms (0 = no floor)
-- ARGV[6] count (usize): entries to return at most
-- Returns {now ms, gap 0|1, reached the end 0|1, the position reading started after,
--          {{id, {field, value, ...}}, ...}}.
-- A gap: entries after the position were trimmed (XINFO's max-deleted-entry-id is past it),
-- the stream expired while the position was not its end, the cursor is older than twice the
-- retention (the stream may have expired and come back), or the max-age floor skipped entries.
local rcall = redis.call
local outbox = KEYS[1]
-- Stream ids compared as text: a sequence number may exceed what a Lua number holds exactly.
local function later(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, bm = tonumber(am), tonumber(bm)
  if am ~= bm then return am > bm end
  if #as ~= #bs then return #as > #bs end
  return as > bs
end
local now = now_ms()
local after = ARGV[1]
local exists = rcall('EXISTS', outbox) == 1
local gap = 0
if now - tonumber(ARGV[3]) > 2 * tonumber(ARGV[4]) then
  gap = 1
elseif exists then
  local info = rcall('XINFO', 'STREAM', outbox)
  for i = 1, #info, 2 do
    if info[i] == 'max-deleted-entry-id' and later(info[i + 1], after) then gap = 1 end
  end
elseif ARGV[2] ~= '1' then
  gap = 1
end
local max_age = tonumber(ARGV[5])
if max_age > 0 then
  local floor = math.max(now - max_age - 1, 0) .. '-18446744073709551615'
  if later(floor, after) then
    if exists and #rcall('XRANGE', outbox, '(' .. after, floor, 'COUNT', 1) > 0 then gap = 1 end
    after = floor
  end
end
if not exists then return {now, gap, 1, after, {}} end
local count = tonumber(ARGV[6])
local entries = rcall('XRANGE', outbox, '(' .. after, '+', 'COUNT', count + 1)
local ended = 1
if #entries > count then
  ended = 0
  entries[#entries] = nil
end
return {now, gap, ended, after, entries}
