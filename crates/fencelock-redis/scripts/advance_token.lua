-- Raises the token counter to at least the floor, so the next grant is above it.
-- KEYS[1] token counter
-- ARGV[1] floor, a decimal string without sign or leading zeros
-- Returns the counter afterwards as a decimal string.
-- Compared as decimal strings: Lua numbers are doubles and lose precision past 2^53.
local current = redis.call('GET', KEYS[1])
if current then
  if not string.match(current, '^%d+$') then
    return redis.error_reply('ERR fencelock token counter ' .. KEYS[1] .. ' is not a non-negative integer')
  end
  current = string.gsub(current, '^0+(%d)', '%1')
  if #current > #ARGV[1] or (#current == #ARGV[1] and current >= ARGV[1]) then
    return current
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
