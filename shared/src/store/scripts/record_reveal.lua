-- record_reveal: an operator's reveal of a task's sensitive fields, written to its timeline
-- before anything is shown. Only where the timeline exists (RPUSHX, as every transition): a
-- task without one gets no entry, and the reply says so, so that nothing is revealed unaudited.
-- Bounded: past ARGV[2] reveal entries the oldest goes, so a loop of reveals never pushes the
-- task's transitions out of its timeline (the prelude's TIMELINE_MAX bounds the whole list);
-- each entry carries its ordinal (`n`), so the number of reveals survives the removals.
-- KEYS[1] timeline: timeline
-- ARGV[1] by: the operator's "tenant/principal"
-- ARGV[2] kept (usize): the most reveal entries kept (at least 1)
-- Returns {1, at ms, n} recorded | {0} the task has no timeline: nothing recorded.
local rcall = redis.call
local key = KEYS[1]
local reveals, oldest, n = 0, nil, 0
for _, text in ipairs(rcall('LRANGE', key, 0, -1)) do
  local ok, entry = pcall(cjson.decode, text)
  if ok and type(entry) == 'table' and entry.ev == 'revealed' then
    reveals = reveals + 1
    oldest = oldest or text
    n = math.max(n, tonumber(entry.n) or reveals)
  end
end
local now = now_ms()
n = n + 1
if timeline(key, now, {ev = 'revealed', by = ARGV[1], n = n}) == 0 then return {REPLY.NOTHING} end
-- After the write, so that a list that exists is never emptied (and so never loses its expiry).
if reveals >= tonumber(ARGV[2]) then rcall('LREM', key, 1, oldest) end
return {REPLY.OK, now, n}
