-- Renews one reader of a read phase; never re-creates a reader or a phase that is gone.
-- KEYS[1] lock key, KEYS[2] readers hash
-- ARGV[1] the phase's fence "<owner>:<token>", ARGV[2] reader id, ARGV[3] ttl in milliseconds
-- Returns 1 when renewed, 0 when the reader is no longer in the phase (expired, released,
-- phase over), -1 when another grant (a writer, another phase) holds the key.
local held, fence = holder(KEYS[1])
if not held then
  return 0
end
if fence ~= ARGV[1] then
  return -1
end
local now = now_ms()
local expiry = redis.call('HGET', KEYS[2], ARGV[2])
if not expiry or expiry_of(KEYS[2], expiry) < now then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[2], string.format('%d', now + tonumber(ARGV[3])))
keep_live(KEYS[1], KEYS[2], fence, now)
return 1
