-- A fenced operation of RedisStorage: admits the fence (admit.lua, prepended) and, if
-- admitted, records it and reads or writes the value, all in one step. A fenced read records
-- the fence even when the resource has no value yet. Nothing changes when the fence is
-- refused.
-- KEYS[1] resource hash (fields value, token, owner)
-- ARGV[1] token (decimal, no leading zeros), ARGV[2] owner (32 hex digits),
-- ARGV[3] rule: 'monotonic' or 'strict', ARGV[4] 'read' or 'write', ARGV[5] value (writes)
-- Returns { 'ok', value or false } (the value read; false for writes) or
-- { 'stale', last token, last owner }.
if ARGV[4] ~= 'write' and ARGV[4] ~= 'read' then
  return redis.error_reply('ERR fencelock unknown operation ' .. tostring(ARGV[4]))
end
local refused = admit(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if refused then
  return refused
end
if ARGV[4] == 'write' then
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2], 'value', ARGV[5])
  return { 'ok', false }
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2])
return { 'ok', redis.call('HGET', KEYS[1], 'value') }
