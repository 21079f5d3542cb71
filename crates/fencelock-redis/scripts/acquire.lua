-- (token.lua and queue.lua come first.) Takes the lock if it is free and hands out the next
-- fencing token, in one step; on one server, in arrival order among the waiters queued for it.
-- KEYS[1] lock key, KEYS[2] token counter (never expires, never deleted)
-- KEYS[3] queue, KEYS[4] places, KEYS[5] asks (one server only; absent on Redlock nodes and
-- a cluster)
-- ARGV[1] owner (32 hex digits; a queued try's owner is its waiter id)
-- ARGV[2] ttl in milliseconds
-- ARGV[3] waiter (32 hex digits; empty for a try that does not queue), ARGV[4] place ttl ms,
-- ARGV[5] the waiter's grant box (a list under the prefix, see hand_off; may be absent)
-- Returns the new token as a decimal string; for a queued try that finds the lock already
-- handed to its waiter (release.lua, leave.lua), renews that grant for the ttl and returns
-- its token. Refused: false without a queue; with one, for a try that does not queue the
-- milliseconds until the turn may come (the holder's time left) or -1 when unknown, and for
-- a queued try { that, the server's clock in microseconds as text }.
-- GET (not EXISTS) so that a lock key of the wrong type is a WRONGTYPE error, not "held".
local queued = KEYS[3] ~= nil
local waiter = ARGV[3] or ''
local head = nil
local held = redis.call('GET', KEYS[1])
if queued and waiter ~= '' and held then
  -- A hand-off whose publish this waiter missed, or that it has not taken up yet: its own.
  local mine = string.match(held, '^' .. waiter .. ':(%d+)$')
  if mine then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    unqueue(KEYS[3], KEYS[4], KEYS[5], waiter)
    return mine
  end
end
if queued then
  -- A place whose waiter stopped trying lapses, so a vanished waiter holds no one up.
  head = queue_head(KEYS[3], KEYS[4], KEYS[5])
end
if not held and (head == nil or head == waiter) then
  local token, why = grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
  if not token then
    return bad_counter(KEYS[2], why)
  end
  if head ~= nil then
    unqueue(KEYS[3], KEYS[4], KEYS[5], waiter)
  end
  return token
end
if not queued then
  return false
end
local left = -1
if held then
  left = redis.call('PTTL', KEYS[1])
end
if waiter == '' then
  return left
end
-- The place keeps its arrival; each try pushes back when it lapses, and leaves the ttl a
-- hand-off grants.
local now = now_ms()
redis.call('ZADD', KEYS[3], 'NX', now, waiter)
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), waiter)
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('PEXPIRE', KEYS[4], ARGV[4])
if KEYS[5] then
  local ask = ARGV[2]
  if ARGV[5] and ARGV[5] ~= '' then
    ask = ask .. ' ' .. ARGV[5]
  end
  redis.call('HSET', KEYS[5], waiter, ask)
  redis.call('PEXPIRE', KEYS[5], ARGV[4])
end
return { left, now_us() }
