-- A key's token counter, written once: prepended to every script that takes a token for a
-- grant (before queue.lua, or before read_phase.lua for a read phase; see src/scripts.rs).
-- A counter never expires and is never deleted; absent, it counts from 0.

-- Advances `counter` and returns its new value as decimal text; or nil and why not, with the
-- counter as it was, when it is not a non-negative integer that INCR can raise (text, the
-- wrong type, a negative number, or at the 64-bit limit). INCR's own refusal is the check,
-- so a grant costs no read of the counter before it. Below 2^53 the reply, a Lua number,
-- is exact; past that a double loses digits, so the counter is read back as a string.
local function next_token(counter)
  local n = redis.pcall('INCR', counter)
  if type(n) == 'table' then
    return nil, n.err
  end
  if n < 1 then
    redis.call('DECR', counter)
    return nil, 'negative'
  end
  if n < 9007199254740992 then
    return string.format('%d', n)
  end
  return redis.call('GET', counter)
end

-- The error reply for a token counter that cannot give a next token (next_token's why).
local function bad_counter(counter, why)
  return redis.error_reply('ERR fencelock token counter ' .. counter
    .. ' is not a non-negative integer below 2^63-1 (' .. tostring(why) .. ')')
end

-- Whether the counter's next token can be taken (next_token would succeed): absent, or the
-- decimal text of an integer from 0 to 2^63-2 as Redis writes one (no sign, no leading zero).
-- For a script that must check every counter of a set before it changes any.
local function counter_ok(counter)
  local last = redis.call('GET', counter)
  if not last or last == '0' then
    return true
  end
  if not string.match(last, '^[1-9]%d*$') then
    return false
  end
  return #last < 19 or (#last == 19 and last < '9223372036854775807')
end
