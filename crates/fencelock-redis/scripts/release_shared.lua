-- Removes one reader from a read phase; the last one out ends the phase and wakes waiters.
-- KEYS[1] readers hash
-- ARGV[1] the phase's fence "<owner>:<token>", ARGV[2] reader id, ARGV[3] release channel
-- Returns 1 when the reader left a phase it was live in, 0 when it was no longer in it
-- (an expired reader is removed all the same).
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then
  return 0
end
local expiry = redis.call('HGET', KEYS[1], ARGV[2])
if not expiry then
  return 0
end
local now = now_ms()
redis.call('HDEL', KEYS[1], ARGV[2])
if keep_live(KEYS[1], now) == 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[1])
end
if expiry_of(KEYS[1], expiry) < now then
  return 0
end
return 1
