-- poll_task: tasks/get for a client. Ownership first, from the owner fields alone (a stranger
-- must not be able to throttle the owner, nor time the read of a record it does not own), then
-- the poll rate: a read sooner than `tolerance * pollIntervalMs` after the
-- previous one is refused, unless the task changed since: the marker holds the version that
-- poll was answered with. Returns the record fields a snapshot needs, in one round trip.
-- KEYS[1] record: task record   KEYS[2] inputs: inputs hash   KEYS[3] poll: poll marker   KEYS[4] outcome: outcome (from_aside)
-- ARGV[1] tenant   ARGV[2] principal   ARGV[3] tolerance (0..1; '0' = no poll limit)
-- Returns {1, fields (HMGET order of SNAPSHOT_FIELDS), inputs (flat k,v)} | {-1} not found
--       | {-9, retry_after_ms, pollIntervalMs}.
local rcall = redis.call
local record, inputs, marker = KEYS[1], KEYS[2], KEYS[3]
local who = rcall('HMGET', record, 'tenant', 'principal')
if not who[1] or who[1] ~= ARGV[1] or who[2] ~= ARGV[2] then return {REPLY.NOT_FOUND} end
local FIELDS = {'tenant', 'principal', 'status', 'msg', 'created', 'updated', 'ttl', 'poll', 'result', 'error', 'ver'}
local f = rcall('HMGET', record, unpack(FIELDS))
local tolerance = tonumber(ARGV[3])
local interval = math.floor(tonumber(f[8]) * tolerance)
if interval > 0 then
  if rcall('GET', marker) == f[11] then
    local wait = rcall('PTTL', marker)
    if wait > 0 then return {-9, wait, tonumber(f[8])} end
  end
  rcall('SET', marker, f[11], 'PX', interval)
end
-- `result` and `error` are the 9th and 10th fields.
f[9], f[10] = from_aside(f[9], KEYS[4]), from_aside(f[10], KEYS[4])
return {REPLY.OK, f, rcall('HGETALL', inputs)}
