-- (queue.lua comes first.) Takes the lock if it is free and hands out the next fencing
-- token, in one step; on one server, in arrival order among the waiters queued for it.
-- KEYS[1] lock key, KEYS[2] token counter (never expires, never deleted)
-- KEYS[3] queue, KEYS[4] places (one server only; absent on Redlock nodes and a cluster)
-- ARGV[1] owner (32 hex digits), ARGV[2] ttl in milliseconds
-- ARGV[3] waiter (32 hex digits; empty for a try that does not queue), ARGV[4] place ttl ms
-- Returns the new token as a decimal string. Refused: false without a queue; with one, the
-- milliseconds until the turn may come (the holder's time left), or -1 when unknown.
-- GET (not EXISTS) so that a lock key of the wrong type is a WRONGTYPE error, not "held".
local queued = KEYS[3] ~= nil
local waiter = ARGV[3] or ''
local head = nil
if queued then
  -- A place whose waiter stopped trying lapses, so a vanished waiter holds no one up.
  head = queue_head(KEYS[3], KEYS[4])
end
local held = redis.call('GET', KEYS[1])
if not held and (head == nil or head == waiter) then
  local last = redis.call('GET', KEYS[2])
  if last and not string.match(last, '^%d+$') then
    return redis.error_reply('ERR fencelock token counter ' .. KEYS[2] .. ' is not a non-negative integer')
  end
  redis.call('INCR', KEYS[2])
  -- Read the counter back as a string: Lua numbers are doubles and lose precision past 2^53.
  local token = redis.call('GET', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
  if head ~= nil then
    redis.call('ZREM', KEYS[3], waiter)
    redis.call('ZREM', KEYS[4], waiter)
  end
  return token
end
if not queued then
  return false
end
if waiter ~= '' then
  -- The place keeps its arrival; each try pushes back when it lapses.
  local now = now_ms()
  redis.call('ZADD', KEYS[3], 'NX', now, waiter)
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), waiter)
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
end
if held then
  return redis.call('PTTL', KEYS[1])
end
return -1
