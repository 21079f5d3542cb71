-- Reads the holder, its remaining time and the last token in one consistent step.
-- KEYS[1] lock key, KEYS[2] token counter
-- Returns { lock value or false, PTTL of the lock in ms, counter or false }.
return { redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) }
