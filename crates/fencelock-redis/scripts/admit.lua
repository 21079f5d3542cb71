-- The fence rule of DESIGN section 2, written once: every fenced script is this file followed
-- by its own text (see src/scripts.rs), and calls admit() before it changes anything.
-- admit(record, token, owner, rule)
--   record: a hash whose fields token and owner hold the last admitted fence (absent: none)
--   token: decimal, no leading zeros; owner: 32 hex digits; rule: 'monotonic' or 'strict'
-- Returns nil when the fence is admitted, { 'stale', last token, last owner } when it is
-- refused, or an error reply for a malformed record or an unknown rule; the caller returns
-- anything that is not nil as it is. admit() writes nothing: the caller records the fence
-- (HSET record token owner) once everything else is checked.
local function admit(record, token, owner, rule)
  local last = redis.call('HMGET', record, 'token', 'owner')
  if not last[1] then
    return nil
  end
  if not string.match(last[1], '^[1-9]%d*$') or not last[2] then
    return redis.error_reply('ERR fencelock resource ' .. record .. ' holds a malformed fence')
  end
  -- Decimal strings without leading zeros compare as numbers by length, then text; Lua
  -- numbers are doubles and lose precision past 2^53.
  local newer = #token > #last[1] or (#token == #last[1] and token > last[1])
  local same = token == last[1] and owner == last[2]
  local admitted
  if rule == 'monotonic' then
    admitted = newer or same
  elseif rule == 'strict' then
    admitted = newer
  else
    return redis.error_reply('ERR fencelock unknown fence rule ' .. tostring(rule))
  end
  if admitted then
    return nil
  end
  return { 'stale', last[1], last[2] }
end
