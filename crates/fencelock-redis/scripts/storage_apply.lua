-- A fenced operation: admits the fence under the rule of DESIGN section 2 and, if admitted,
-- records it and reads or writes the value, all in one step. A fenced read records the fence
-- even when the resource has no value yet. Nothing changes when the fence is refused.
-- KEYS[1] resource hash (fields value, token, owner)
-- ARGV[1] token (decimal, no leading zeros), ARGV[2] owner (32 hex digits),
-- ARGV[3] rule: 'monotonic' or 'strict', ARGV[4] 'read' or 'write', ARGV[5] value (writes)
-- Returns { 'ok', value or false } (the value read; false for writes) or
-- { 'stale', last token, last owner }.
local last = redis.call('HMGET', KEYS[1], 'token', 'owner')
if last[1] then
  if not string.match(last[1], '^[1-9]%d*$') or not last[2] then
    return redis.error_reply('ERR fencelock resource ' .. KEYS[1] .. ' holds a malformed fence')
  end
  -- Decimal strings without leading zeros compare as numbers by length, then text.
  local newer = #ARGV[1] > #last[1] or (#ARGV[1] == #last[1] and ARGV[1] > last[1])
  local same = ARGV[1] == last[1] and ARGV[2] == last[2]
  local admitted
  if ARGV[3] == 'monotonic' then
    admitted = newer or same
  elseif ARGV[3] == 'strict' then
    admitted = newer
  else
    return redis.error_reply('ERR fencelock unknown fence rule ' .. ARGV[3])
  end
  if not admitted then
    return { 'stale', last[1], last[2] }
  end
end
if ARGV[4] == 'write' then
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2], 'value', ARGV[5])
  return { 'ok', false }
elseif ARGV[4] == 'read' then
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2])
  return { 'ok', redis.call('HGET', KEYS[1], 'value') }
end
return redis.error_reply('ERR fencelock unknown operation ' .. tostring(ARGV[4]))
