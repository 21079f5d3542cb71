-- (queue.lua comes first.) Gives up a waiter's place (its request timed out, failed or was cancelled); when it was the
-- waiter a free lock was kept for, wakes the next one.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] places
-- ARGV[1] waiter (32 hex digits), ARGV[2] release channel
-- Returns 1 when the waiter had a place, 0 when it had none.
local head = queue_head(KEYS[2], KEYS[3])
local had = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if head == ARGV[1] and not redis.call('GET', KEYS[1]) then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.call('PUBLISH', ARGV[2], next)
  end
end
return had
