-- (queue.lua comes first.) Deletes the lock if it is still held by this owner with this token, and wakes the next
-- waiter (on one server, the first live one queued; else everyone).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] places (one server only)
-- ARGV[1] expected lock value ("<owner>:<token>"), ARGV[2] release channel
-- Publishes the next waiter's id, or the released lock value (which wakes every waiter).
-- Returns 1 when released, 0 when the lock was no longer ours (nothing changed).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local next = nil
if KEYS[2] ~= nil then
  next = queue_head(KEYS[2], KEYS[3])
end
redis.call('PUBLISH', ARGV[2], next or ARGV[1])
return 1
