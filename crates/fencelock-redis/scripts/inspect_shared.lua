-- Reads the live read phase in one consistent step; writes nothing.
-- KEYS[1] lock key, KEYS[2] readers hash
-- Returns { the phase's fence or false, PTTL of the lock key in ms, live readers }.
local _, fence = holder(KEYS[1])
if not fence then
  return { false, -2, 0 }
end
local now = now_ms()
local fields = redis.call('HGETALL', KEYS[2])
local live = 0
for i = 2, #fields, 2 do
  if expiry_of(KEYS[2], fields[i]) >= now then
    live = live + 1
  end
end
return { fence, redis.call('PTTL', KEYS[1]), live }
