-- Reads the live read phase in one consistent step; writes nothing.
-- KEYS[1] readers hash
-- Returns { the phase's fence or false, PTTL of the hash in ms, live readers }.
local fence = redis.call('HGET', KEYS[1], 'fence')
if not fence then
  return { false, -2, 0 }
end
local now = now_ms()
local fields = redis.call('HGETALL', KEYS[1])
local live = 0
for i = 1, #fields, 2 do
  if fields[i] ~= 'fence' and expiry_of(KEYS[1], fields[i + 1]) >= now then
    live = live + 1
  end
end
return { fence, redis.call('PTTL', KEYS[1]), live }
