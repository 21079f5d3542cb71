-- Deletes the lock on one Redlock node if this grant still holds it there, and wakes waiters.
-- The grant is recognised by its owner (random per grant); see redlock_extend.lua.
-- KEYS[1] lock key
-- ARGV[1] owner followed by a colon ("<owner>:"), ARGV[2] release channel
-- Returns 1 when released, 0 when this grant did not hold the lock here (nothing changed).
local current = redis.call('GET', KEYS[1])
if not current or string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], current)
return 1
