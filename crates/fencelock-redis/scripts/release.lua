-- (token.lua and queue.lua come first.) Deletes the lock if it is still held by this owner
-- with this token and, on one server, hands it to the first live waiter queued for it
-- (hand_off); else wakes everyone.
-- KEYS[1] lock key; one server only: KEYS[2] queue, KEYS[3] places, KEYS[4] token counter,
-- KEYS[5] asks
-- ARGV[1] expected lock value ("<owner>:<token>"), ARGV[2] release channel,
-- ARGV[3] hand-off ttl ms (one server only)
-- Publishes the grant (or the next waiter's id), or the released lock value, which wakes
-- every waiter.
-- Returns 1 when released, 0 when the lock was no longer ours (nothing changed).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[2] ~= nil then
  hand_off(KEYS[1], KEYS[4], KEYS[2], KEYS[3], KEYS[5], ARGV[2], ARGV[3], ARGV[1])
else
  redis.call('PUBLISH', ARGV[2], ARGV[1])
end
return 1
