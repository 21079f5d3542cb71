-- The unfenced observer read of a fenced batch (RedisFence::peek): the last admitted fence and
-- the values read, in one consistent step; records nothing.
-- KEYS[1] the fence record (hash: token, owner); KEYS[1 + i] the key of command i.
-- ARGV[i] the name of command i: 'get' or 'hgetall'.
-- Returns { last token or false, last owner or false, one reply per command }.
if #ARGV ~= #KEYS - 1 then
  return redis.error_reply('ERR fencelock commands and keys do not match')
end
local last = redis.call('HMGET', KEYS[1], 'token', 'owner')
local out = { last[1], last[2] }
for index, name in ipairs(ARGV) do
  local key = KEYS[index + 1]
  local k = redis.call('TYPE', key)['ok']
  if name == 'get' and (k == 'none' or k == 'string') then
    out[index + 2] = redis.call('GET', key)
  elseif name == 'hgetall' and (k == 'none' or k == 'hash') then
    out[index + 2] = redis.call('HGETALL', key)
  else
    return redis.error_reply('ERR fencelock command ' .. index .. ' (' .. tostring(name) .. ' ' .. key .. '): the key holds a ' .. k)
  end
end
return out
