-- Renews the lock if it is still held by this owner with this token; never re-creates it.
-- KEYS[1] lock key
-- ARGV[1] expected lock value ("<owner>:<token>"), ARGV[2] ttl in milliseconds
-- Returns 1 when renewed, 0 when the lock is gone, -1 when another grant holds it.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current ~= ARGV[1] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
