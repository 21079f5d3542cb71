-- Fenced write: admits the fence under the rule (DESIGN section 2) and stores the value.
-- KEYS[1] resource hash (fields value, token, owner)
-- ARGV[1] token (decimal, no leading zeros), ARGV[2] owner (32 hex digits),
-- ARGV[3] rule: 'monotonic' or 'strict', ARGV[4] value (bytes)
-- Returns { 'ok' } or { 'stale', last token, last owner }; nothing changes when stale.
local last = redis.call('HMGET', KEYS[1], 'token', 'owner')
if last[1] then
  if not string.match(last[1], '^[1-9]%d*$') or not last[2] then
    return redis.error_reply('ERR fencelock resource ' .. KEYS[1] .. ' holds a malformed fence')
  end
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
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2], 'value', ARGV[4])
return { 'ok' }
