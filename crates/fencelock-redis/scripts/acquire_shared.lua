-- Joins the key's read phase as a reader, or starts a new phase, in one step.
-- KEYS[1] lock key (the writer's), KEYS[2] token counter, KEYS[3] readers hash
-- ARGV[1] reader id (32 hex digits), ARGV[2] ttl in milliseconds,
-- ARGV[3] owner drawn for a new phase (32 hex digits; unused when the phase lives)
-- Returns the phase's fence "<owner>:<token>", or false while a writer holds the lock.
-- A reader already in the live phase is renewed; the first reader of a phase takes the next
-- token from the counter exclusive grants use, so phases and writers share one order.
local held, fence = holder(KEYS[1])
if held and not fence then
  return false
end
local now = now_ms()
if not fence or keep_live(KEYS[1], KEYS[3], fence, now) == 0 then
  local token, why = next_token(KEYS[2])
  if not token then
    return bad_counter(KEYS[2], why)
  end
  fence = ARGV[3] .. ':' .. token
  redis.call('DEL', KEYS[3])
end
redis.call('HSET', KEYS[3], ARGV[1], string.format('%d', now + tonumber(ARGV[2])))
keep_live(KEYS[1], KEYS[3], fence, now)
return fence
