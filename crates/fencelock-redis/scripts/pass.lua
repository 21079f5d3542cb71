-- (token.lua and queue.lua come first.) Passes the lock from its holder to a new owner of
-- the same process in one step: the holder's lease ends and the new owner's begins, with the
-- key's next token, while the lock is never free in between (DESIGN 4.0.2).
-- KEYS[1] lock key, KEYS[2] token counter; one server only: KEYS[3] queue, KEYS[4] places,
-- KEYS[5] asks
-- ARGV[1] the holder's lock value ("<owner>:<token>"), ARGV[2] the new owner, ARGV[3] ttl ms
-- Returns the new token as decimal text; false, with nothing changed, when the lock is not
-- the holder's any more or a live waiter is queued for it (a pass never goes ahead of a
-- queued place: the holder releases instead, which hands the lock to that waiter).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
if KEYS[3] ~= nil and queue_head(KEYS[3], KEYS[4], KEYS[5]) ~= nil then
  return false
end
local token, why = grant(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
if not token then
  return bad_counter(KEYS[2], why)
end
return token
