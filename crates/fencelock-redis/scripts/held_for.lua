-- How long the key stays held by anyone: its writer or its read phase, whichever lasts longer.
-- KEYS[1] lock key, KEYS[2] readers hash
-- Returns a PTTL in ms: -2 when neither exists, -1 when either has no expiry (not written by
-- fencelock), else the longer of the two.
local writer = redis.call('PTTL', KEYS[1])
local readers = redis.call('PTTL', KEYS[2])
if writer == -1 or readers == -1 then
  return -1
end
if writer > readers then
  return writer
end
return readers
