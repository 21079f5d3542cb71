-- Removes one reader from a read phase; the last one out ends the phase and wakes waiters.
-- KEYS[1] lock key, KEYS[2] readers hash
-- ARGV[1] the phase's fence "<owner>:<token>", ARGV[2] reader id, ARGV[3] release channel
-- Returns 1 when the reader left a phase it was live in, 0 when it was no longer in it
-- (an expired reader is removed all the same).
local _, fence = holder(KEYS[1])
if fence ~= ARGV[1] then
  return 0
end
local expiry = redis.call('HGET', KEYS[2], ARGV[2])
if not expiry then
  return 0
end
local now = now_ms()
redis.call('HDEL', KEYS[2], ARGV[2])
if keep_live(KEYS[1], KEYS[2], fence, now) == 0 then
  redis.call('PUBLISH', ARGV[3], fence)
end
if expiry_of(KEYS[2], expiry) < now then
  return 0
end
return 1
