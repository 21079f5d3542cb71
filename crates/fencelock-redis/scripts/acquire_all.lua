-- (token.lua and queue.lua come first.) Takes every lock of a set, or none, in one step, each
-- with the next token of its own counter (DESIGN 4.2, a set in one step). One server only: the
-- keys of different locks hash to different cluster slots.
-- KEYS: five per lock, in the order of the set: lock key, token counter, queue, places, asks.
-- ARGV[1] owner (32 hex digits, the owner of every grant of the set), ARGV[2] ttl in ms.
-- Returns the tokens as decimal strings, in the order of the set; false when any lock is
-- held (a read phase included) or has a live waiter queued for it, with nothing changed but
-- the queues' lapsed places.
local locks = #KEYS / 5
for i = 0, locks - 1 do
  local lock, counter = KEYS[i * 5 + 1], KEYS[i * 5 + 2]
  -- GET (not EXISTS) so that a lock key of the wrong type is a WRONGTYPE error, not "held".
  if redis.call('GET', lock) then
    return false
  end
  -- A set never overtakes a queue: a waiter queued for one of its locks goes first.
  if queue_head(KEYS[i * 5 + 3], KEYS[i * 5 + 4], KEYS[i * 5 + 5]) ~= nil then
    return false
  end
  -- Every counter is checked before any is advanced, so a bad one changes nothing.
  if not counter_ok(counter) then
    return bad_counter(counter, redis.call('GET', counter))
  end
end
local tokens = {}
for i = 0, locks - 1 do
  -- Cannot fail: every counter passed counter_ok above, in this same atomic script.
  tokens[i + 1] = grant(KEYS[i * 5 + 1], KEYS[i * 5 + 2], ARGV[1], ARGV[2])
end
return tokens
