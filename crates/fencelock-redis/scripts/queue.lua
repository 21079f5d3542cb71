-- The waiters' queue of one lock, on one server: prepended (after token.lua) to acquire.lua,
-- acquire_all.lua, release.lua and leave.lua, so the rule that a lapsed place holds no one
-- up, the grant and the hand-off are written once.
-- A queue is two sorted sets of waiter ids, by arrival (the server's clock in ms) and by when
-- each place lapses unless its waiter tries again, and a hash of the ttl each waiter asked
-- for (the asks), which a hand-off needs.

-- The server's clock in milliseconds.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The server's clock in microseconds, as decimal text (a double would print it rounded).
local function now_us()
  local time = redis.call('TIME')
  return time[1] .. string.format('%06d', tonumber(time[2]))
end

-- Grants `lock` to `owner` for `ms` milliseconds with the counter's next token, and returns
-- the token; or nil and why when the counter cannot give one (next_token in token.lua),
-- with nothing changed. The callers have checked that the lock is free.
local function grant(lock, counter, owner, ms)
  local token, why = next_token(counter)
  if not token then
    return nil, why
  end
  redis.call('SET', lock, owner .. ':' .. token, 'PX', ms)
  return token
end

-- Forgets every place that lapsed, then returns the first live waiter (or nil). A key nobody
-- waits for has no queue, and costs one EXISTS.
local function queue_head(queue, places, asks)
  if redis.call('EXISTS', queue) == 0 then
    return nil
  end
  local now = now_ms()
  local lapsed = redis.call('ZRANGEBYSCORE', places, '-inf', now)
  for _, gone in ipairs(lapsed) do
    redis.call('ZREM', queue, gone)
    if asks then
      redis.call('HDEL', asks, gone)
    end
  end
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', places, '-inf', now)
  end
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

-- Takes `waiter` out of the queue.
local function unqueue(queue, places, asks, waiter)
  local had = redis.call('ZREM', queue, waiter)
  redis.call('ZREM', places, waiter)
  if asks then
    redis.call('HDEL', asks, waiter)
  end
  return had
end

-- The lock is free: grants it to the first live waiter, as that waiter's own try would (the
-- waiter id is the grant's owner, the token the counter's next value), for the shorter of
-- the ttl it asked for and `handoff_ms`. A waiter whose ask names its process's grant box
-- (`<ms> <box>`) gets the grant pushed there, `<waiter> <token> <ms>`, which its blocked pop
-- answers; one without a box is woken by a publish of '>' waiter. A waiter that left no ask,
-- or a token counter that cannot give a token (nothing changed), gets the old wake-up instead
-- (its id: it tries for itself, and its try reports the counter). With nobody queued,
-- publishes `otherwise`.
local function hand_off(lock, counter, queue, places, asks, channel, handoff_ms, otherwise)
  local head = queue_head(queue, places, asks)
  if head == nil then
    if otherwise then
      redis.call('PUBLISH', channel, otherwise)
    end
    return
  end
  local asked = asks and redis.call('HGET', asks, head)
  local token = nil
  local ms = 0
  local box = nil
  if asked then
    local want
    want, box = string.match(asked, '^(%d+) ?(.*)$')
    if want then
      ms = math.min(tonumber(want), tonumber(handoff_ms))
      token = grant(lock, counter, head, ms)
    end
  end
  if not token then
    redis.call('PUBLISH', channel, head)
    return
  end
  unqueue(queue, places, asks, head)
  if box ~= nil and box ~= '' then
    redis.call('RPUSH', box, head .. ' ' .. token .. ' ' .. ms)
    redis.call('PEXPIRE', box, handoff_ms)
  else
    redis.call('PUBLISH', channel, '>' .. head)
  end
end
