-- Lists a lock's queue in one consistent step, writing nothing (DESIGN 5.2, inspect).
-- KEYS[1] lock key, KEYS[2] readers, KEYS[3] queue, KEYS[4] places
-- Returns { now ms, lock value or false, PTTL of the lock in ms, readers, waiters } where
-- readers is a flat list of reader id, expiry ms (a read phase's; empty otherwise) and waiters
-- a flat list of waiter id, lapse ms, in arrival order; places that lapsed are left out, as the
-- next grant or release forgets them.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local held = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local readers = {}
if held and string.match(held, ':read$') then
  local fields = redis.call('HGETALL', KEYS[2])
  for i = 1, #fields, 2 do
    local expiry = tonumber(fields[i + 1])
    if expiry and expiry >= now then
      readers[#readers + 1] = fields[i]
      readers[#readers + 1] = fields[i + 1]
    end
  end
end
local waiters = {}
for _, waiter in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local lapse = redis.call('ZSCORE', KEYS[4], waiter)
  if lapse and tonumber(lapse) > now then
    waiters[#waiters + 1] = waiter
    waiters[#waiters + 1] = lapse
  end
end
return { now, held, pttl, readers, waiters }
