-- drop_hook: ends a webhook subscription (events/unsubscribe): its record, dead letters and
-- index entries, in one step. A deliverer holding it finds the record gone at its next write.
-- KEYS[1] record: the subscription record
-- KEYS[2] dead: its dead letters
-- KEYS[3] index: the bucket's subscriptions
-- KEYS[4] tenant: the tenant's subscription ids
-- KEYS[5] principal: the principal's subscription ids
-- ARGV[1] id: the subscription id
-- Returns {1} dropped | {-1} no such subscription.
local rcall = redis.call
local id = ARGV[1]
local existed = rcall('DEL', KEYS[1]) == 1
rcall('DEL', KEYS[2])
rcall('ZREM', KEYS[3], id)
rcall('ZREM', KEYS[4], id)
rcall('ZREM', KEYS[5], id)
if existed then return {REPLY.OK} end
return {REPLY.NOT_FOUND}
