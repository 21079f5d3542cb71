-- Deletes the lock if it is still held by this owner with this token, and wakes waiters.
-- KEYS[1] lock key
-- ARGV[1] expected lock value ("<owner>:<token>"), ARGV[2] release channel
-- Returns 1 when released, 0 when the lock was no longer ours (nothing changed).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 1
