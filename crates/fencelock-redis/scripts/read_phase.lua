-- The read phase of a lock key, written once: every shared-lock script is this file followed
-- by its own text (see src/scripts.rs).
-- The phase is one hash under the key's hash tag ({prefix}:{<key>}:readers):
--   field 'fence'      "<owner>:<token>", the fence every reader of the phase presents
--   field <reader id>  32 hex digits -> that reader's expiry, in ms by the server's clock
-- The hash's own expiry is kept at the latest reader's, so the key exists exactly while a
-- reader of the phase is live (a reader is live while its expiry is not before now, as a key
-- is), and a writer's acquire needs to ask only whether it exists.
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

-- Forgets the readers whose expiry is before now, then sets the hash's expiry to the latest
-- of the others, or deletes the hash when no reader is left. Returns how many are left.
local function keep_live(readers, now)
  local fields = redis.call('HGETALL', readers)
  local latest, live = 0, 0
  for i = 1, #fields, 2 do
    if fields[i] ~= 'fence' then
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
  end
  if live == 0 then
    redis.call('DEL', readers)
  else
    redis.call('PEXPIREAT', readers, string.format('%d', latest))
  end
  return live
end
