-- (token.lua and queue.lua come first.) Gives up a waiter's place (its request timed out,
-- failed or was cancelled), and a grant handed to it that it never took up; when the free lock
-- was kept for this waiter or handed to it, hands it to the next one (hand_off).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] places, KEYS[4] token counter, KEYS[5] asks
-- ARGV[1] waiter (32 hex digits), ARGV[2] release channel, ARGV[3] hand-off ttl ms
-- Returns 2 when a grant handed to the waiter was released, 1 when the waiter had a place,
-- 0 when it had neither.
local head = queue_head(KEYS[2], KEYS[3], KEYS[5])
local had = unqueue(KEYS[2], KEYS[3], KEYS[5], ARGV[1])
local held = redis.call('GET', KEYS[1])
if held and string.match(held, '^' .. ARGV[1] .. ':%d+$') then
  redis.call('DEL', KEYS[1])
  hand_off(KEYS[1], KEYS[4], KEYS[2], KEYS[3], KEYS[5], ARGV[2], ARGV[3], held)
  return 2
end
if head == ARGV[1] and not held then
  hand_off(KEYS[1], KEYS[4], KEYS[2], KEYS[3], KEYS[5], ARGV[2], ARGV[3], nil)
end
return had
