-- Reads the writer, the read phase, their remaining times and the last token in one
-- consistent step.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] readers hash
-- Returns { lock value or false, PTTL of the lock in ms, counter or false,
--           the read phase's fence or false, PTTL of the readers hash in ms }.
return {
  redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  redis.call('HGET', KEYS[3], 'fence'), redis.call('PTTL', KEYS[3]),
}
