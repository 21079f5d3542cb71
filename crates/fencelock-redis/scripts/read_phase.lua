-- The read phase of a lock key, written once: every shared-lock script is this file followed
-- by its own text (see src/scripts.rs).
-- While a phase lives, the writer's lock key ({prefix}:{<key>}:lock) holds
-- "<owner>:<token>:read", the phase's fence marked as a phase, with the phase's end as its
-- expiry. So the exclusive lock's own scripts, unchanged, see a live phase as a holder they
-- never own: acquire refuses, extend and release never match, inspect and the waiters' PTTL
-- see the phase's fence and its end. Beside it, the readers hash ({prefix}:{<key>}:readers)
-- maps each reader's id (32 hex digits) to its expiry in ms by the server's clock. A reader
-- is live while its expiry is not before now, as Redis keeps a key while its expiry is not
-- past; both keys expire with the latest live reader.
-- Needs Redis 5 or later: TIME before writes needs effects replication, the default there.

-- The server's clock in milliseconds.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A reader's expiry as stored, or an error naming the hash.
local function expiry_of(readers, value)
  local expiry = tonumber(value)
  if not expiry then
    error('fencelock read phase ' .. readers .. ' holds a reader expiry that is not a number')
  end
  return expiry
end

-- What the lock key holds: nil when it is free, else the holder's value and, for a read
-- phase, the phase's fence "<owner>:<token>".
local function holder(lock)
  local held = redis.call('GET', lock)
  if not held then
    return nil, nil
  end
  return held, string.match(held, '^(.+):read$')
end

-- Forgets the readers whose expiry is before now; then the lock key holds the phase `fence`
-- and both keys expire with the latest live reader, or both are deleted when none is left.
-- Called only while the lock key is free or holds this phase, so it never touches a writer's
-- grant. Returns how many readers are left.
local function keep_live(lock, readers, fence, now)
  local fields = redis.call('HGETALL', readers)
  local latest, live = 0, 0
  for i = 1, #fields, 2 do
    local expiry = expiry_of(readers, fields[i + 1])
    if expiry < now then
      redis.call('HDEL', readers, fields[i])
    else
      live = live + 1
      if expiry > latest then
        latest = expiry
      end
    end
  end
  if live == 0 then
    redis.call('DEL', lock, readers)
  else
    latest = string.format('%d', latest)
    redis.call('SET', lock, fence .. ':read')
    redis.call('PEXPIREAT', lock, latest)
    redis.call('PEXPIREAT', readers, latest)
  end
  return live
end
