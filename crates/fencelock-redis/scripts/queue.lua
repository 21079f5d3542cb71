-- The waiters' queue of one lock, on one server: prepended to acquire.lua, release.lua and
-- leave.lua, so the rule that a lapsed place holds no one up is written once.
-- A queue is two sorted sets of waiter ids: by arrival (the server's clock in ms) and by when
-- each place lapses unless its waiter tries again.

-- The server's clock in milliseconds.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Forgets every place that lapsed, then returns the first live waiter (or nil). A key nobody
-- waits for has no queue, and costs one EXISTS.
local function queue_head(queue, places)
  if redis.call('EXISTS', queue) == 0 then
    return nil
  end
  local now = now_ms()
  local lapsed = redis.call('ZRANGEBYSCORE', places, '-inf', now)
  for _, gone in ipairs(lapsed) do
    redis.call('ZREM', queue, gone)
  end
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', places, '-inf', now)
  end
  return redis.call('ZRANGE', queue, 0, 0)[1]
end
