-- Takes the lock if it is free and hands out the next fencing token, in one step.
-- KEYS[1] lock key, KEYS[2] token counter (never expires, never deleted)
-- ARGV[1] owner (32 hex digits), ARGV[2] ttl in milliseconds
-- Returns the new token as a decimal string, or false when the lock is held.
-- GET (not EXISTS) so that a lock key of the wrong type is a WRONGTYPE error, not "held".
if redis.call('GET', KEYS[1]) then
  return false
end
local last = redis.call('GET', KEYS[2])
if last and not string.match(last, '^%d+$') then
  return redis.error_reply('ERR fencelock token counter ' .. KEYS[2] .. ' is not a non-negative integer')
end
redis.call('INCR', KEYS[2])
-- Read the counter back as a string: Lua numbers are doubles and lose precision past 2^53.
local token = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return token
