-- A fenced batch on the user's own keys (RedisFence::commit): admits the fence (admit.lua,
-- prepended), checks every command against the state it will meet, records the fence, then
-- runs the commands in order, all in one step.
-- KEYS[1] the fence record (hash: token, owner); KEYS[1 + i] the key of command i.
-- ARGV[1] token (decimal, no leading zeros), ARGV[2] owner (32 hex digits),
-- ARGV[3] rule ('monotonic' or 'strict'), ARGV[4] 'check-eviction' to refuse a server that
-- may evict keys (a connection of the user's own, never checked at connect) or '', then each
-- command's name and arguments:
--   'set' value px     px: milliseconds, or '' for no expiry
--   'hset' field value
--   'del'
--   'incrby' n         n: a 64-bit integer
--   'pexpire' ms       ms: a positive integer
--   'get'
--   'hgetall'
-- Returns { 'ok', one reply per command (INCRBY: the value afterwards, as a string) } or
-- { 'stale', last token, last owner }, or { 'evicts', maxmemory-policy } (nothing done).
--
-- Redis does not undo a script that stops half way, so nothing is written before every
-- command has been checked against the state it will meet (key types, integers, overflow,
-- simulated through the batch): a refused fence or a bad command changes nothing. Only
-- running out of memory can stop the script after that, and the fence is already recorded
-- by then, so a stale holder is kept out either way.
local ARITY = { set = 2, hset = 2, del = 0, incrby = 1, pexpire = 1, get = 0, hgetall = 0 }
local ops = {}
local i = 5
while i <= #ARGV do
  local name = ARGV[i]
  local arity = ARITY[name]
  if not arity then
    return redis.error_reply('ERR fencelock unknown command ' .. tostring(name))
  end
  ops[#ops + 1] = { name = name, a = ARGV[i + 1], b = ARGV[i + 2], key = KEYS[#ops + 2] }
  i = i + 1 + arity
end
if i ~= #ARGV + 1 or #ops ~= #KEYS - 1 then
  return redis.error_reply('ERR fencelock commands, keys and arguments do not match')
end

-- INFO (unlike CONFIG) may run in a script: the check is made on the very node that holds
-- the fence record, in the same step. A server that hides the policy is served, as at connect.
if ARGV[4] == 'check-eviction' then
  local policy = string.match(redis.call('INFO', 'memory'), 'maxmemory_policy:([%w%-]+)')
  if policy and policy ~= 'noeviction' then
    return { 'evicts', policy }
  end
end

local refused = admit(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if refused then
  return refused
end

-- A 64-bit integer as Redis parses one: no sign on zero, no leading zeros, no '+'.
local function is_int64(s)
  if type(s) ~= 'string' then
    return false
  end
  local negative = string.sub(s, 1, 1) == '-'
  local digits = negative and string.sub(s, 2) or s
  if digits == '0' then
    return not negative
  end
  if not string.match(digits, '^[1-9]%d*$') or #digits > 19 then
    return false
  end
  return #digits < 19 or digits <= (negative and '9223372036854775808' or '9223372036854775807')
end

-- Exact 64-bit sums in Lua, whose numbers are doubles (exact to 2^53): a value is a pair
-- { high, low } meaning high * 10^9 + low with 0 <= low < 10^9, each part exact.
local BASE = 1000000000
local function split(s)
  local negative = string.sub(s, 1, 1) == '-'
  local digits = negative and string.sub(s, 2) or s
  local high = tonumber(string.sub(digits, 1, -10)) or 0
  local low = tonumber(string.sub(digits, -9))
  if not negative then
    return { high, low }
  end
  if low == 0 then
    return { -high, 0 }
  end
  return { -high - 1, BASE - low }
end
local function add(a, b)
  local low = a[2] + b[2]
  local carry = math.floor(low / BASE)
  return { a[1] + b[1] + carry, low - carry * BASE }
end
local function fits(v)
  -- 9223372036854775807 = { 9223372036, 854775807 }; -9223372036854775808 = { -9223372037, 145224192 }
  return (v[1] < 9223372036 or (v[1] == 9223372036 and v[2] <= 854775807))
    and (v[1] > -9223372037 or (v[1] == -9223372037 and v[2] >= 145224192))
end
local function join(v)
  local high, low, sign = v[1], v[2], ''
  if high < 0 then
    sign = '-'
    if low == 0 then
      high = -high
    else
      high, low = -high - 1, BASE - low
    end
  end
  if high == 0 then
    return sign .. string.format('%.0f', low)
  end
  return sign .. string.format('%.0f', high) .. string.format('%09.0f', low)
end

local function positive(s)
  return type(s) == 'string' and string.match(s, '^[1-9]%d*$') ~= nil and #s <= 15
end

local kinds, values = {}, {}
local function kind(key)
  if kinds[key] == nil then
    kinds[key] = redis.call('TYPE', key)['ok']
  end
  return kinds[key]
end

for index, op in ipairs(ops) do
  local function fail(why)
    return redis.error_reply('ERR fencelock command ' .. index .. ' (' .. op.name .. ' ' .. op.key .. '): ' .. why)
  end
  if op.key == KEYS[1] then
    return fail('names the fence record')
  end
  local k = kind(op.key)
  if op.name == 'set' then
    if op.b ~= '' and not positive(op.b) then
      return fail('the expiry is not a positive number of milliseconds')
    end
    kinds[op.key] = 'string'
    values[op.key] = op.a
  elseif op.name == 'hset' then
    if k ~= 'none' and k ~= 'hash' then
      return fail('the key holds a ' .. k .. ', not a hash')
    end
    kinds[op.key] = 'hash'
  elseif op.name == 'del' then
    kinds[op.key] = 'none'
    values[op.key] = nil
  elseif op.name == 'incrby' then
    if not is_int64(op.a) then
      return fail('the increment is not a 64-bit integer')
    end
    if k ~= 'none' and k ~= 'string' then
      return fail('the key holds a ' .. k .. ', not an integer')
    end
    local current = '0'
    if k == 'string' then
      if values[op.key] == nil then
        values[op.key] = redis.call('GET', op.key)
      end
      current = values[op.key]
    end
    if not is_int64(current) then
      return fail('the value is not a 64-bit integer')
    end
    local sum = add(split(current), split(op.a))
    if not fits(sum) then
      return fail('the result would overflow a 64-bit integer')
    end
    kinds[op.key] = 'string'
    values[op.key] = join(sum)
  elseif op.name == 'pexpire' then
    if not positive(op.a) then
      return fail('the expiry is not a positive number of milliseconds')
    end
  elseif op.name == 'get' then
    if k ~= 'none' and k ~= 'string' then
      return fail('the key holds a ' .. k .. ', not a string')
    end
  elseif op.name == 'hgetall' then
    if k ~= 'none' and k ~= 'hash' then
      return fail('the key holds a ' .. k .. ', not a hash')
    end
  end
end

redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2])
local out = { 'ok' }
for index, op in ipairs(ops) do
  local reply
  if op.name == 'set' then
    if op.b == '' then
      reply = redis.call('SET', op.key, op.a)
    else
      reply = redis.call('SET', op.key, op.a, 'PX', op.b)
    end
  elseif op.name == 'hset' then
    reply = redis.call('HSET', op.key, op.a, op.b)
  elseif op.name == 'del' then
    reply = redis.call('DEL', op.key)
  elseif op.name == 'incrby' then
    -- The value read back as a string: an integer reply becomes a Lua double in here, which
    -- loses precision past 2^53.
    redis.call('INCRBY', op.key, op.a)
    reply = redis.call('GET', op.key)
  elseif op.name == 'pexpire' then
    reply = redis.call('PEXPIRE', op.key, op.a)
  elseif op.name == 'get' then
    reply = redis.call('GET', op.key)
  else
    reply = redis.call('HGETALL', op.key)
  end
  out[index + 1] = reply
end
return out
