-- read_tools: the catalogue as gateways list it: only the specs some live worker still serves
-- (its live-index entry has not expired by Redis's clock), and the pool each one's new tasks
-- are queued on (publish_tools keeps the route; none: `default`, as before pools existed).
-- KEYS[1] specs: specs hash   KEYS[2] live: live index   KEYS[3] routes: routes (name -> pool)
-- Returns {1, {name, spec JSON, ...}, {name, pool, ...}}.
local rcall = redis.call
local now = now_ms()
local names = rcall('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')
local out, routed = {}, {}
if #names > 0 then
  local values = rcall('HMGET', KEYS[1], unpack(names))
  local pools = rcall('HMGET', KEYS[3], unpack(names))
  for i, name in ipairs(names) do
    if values[i] then
      out[#out + 1] = name
      out[#out + 1] = values[i]
      routed[#routed + 1] = name
      routed[#routed + 1] = pools[i] or 'default'
    end
  end
end
return {REPLY.OK, out, routed}
