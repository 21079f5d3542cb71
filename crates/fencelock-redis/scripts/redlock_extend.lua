-- Renews the lock on one Redlock node if this grant still holds it there; never re-creates it.
-- The token part of the value is this node's counter, which may differ between nodes, so the
-- grant is recognised by its owner (random per grant).
-- KEYS[1] lock key
-- ARGV[1] owner followed by a colon ("<owner>:"), ARGV[2] ttl in milliseconds
-- Returns 1 when renewed, 0 when the lock is gone, -1 when another grant holds it.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if string.sub(current, 1, #ARGV[1]) ~= ARGV[1] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
