-- Writes a Redlock grant's token back to one node: raises the counter to at least the token,
-- so any later quorum sees it, and, if the grant holds the lock here, makes the lock value
-- carry that token, keeping the lock's expiry.
-- KEYS[1] token counter, KEYS[2] lock key
-- ARGV[1] token, a decimal string without sign or leading zeros; ARGV[2] owner (32 hex digits)
-- Returns the counter afterwards as a decimal string.
-- Compared as decimal strings: Lua numbers are doubles and lose precision past 2^53.
local current = redis.call('GET', KEYS[1])
local raise = true
if current then
  if not string.match(current, '^%d+$') then
    return redis.error_reply('ERR fencelock token counter ' .. KEYS[1] .. ' is not a non-negative integer')
  end
  current = string.gsub(current, '^0+(%d)', '%1')
  if #current > #ARGV[1] or (#current == #ARGV[1] and current >= ARGV[1]) then
    raise = false
  end
end
if raise then
  redis.call('SET', KEYS[1], ARGV[1])
  current = ARGV[1]
end
local prefix = ARGV[2] .. ':'
local value = redis.call('GET', KEYS[2])
if value and string.sub(value, 1, #prefix) == prefix then
  local pttl = redis.call('PTTL', KEYS[2])
  if pttl > 0 then
    redis.call('SET', KEYS[2], prefix .. ARGV[1], 'PX', pttl)
  end
end
return current
