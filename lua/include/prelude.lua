-- The helpers every script shares. Error replies are part of the protocol
-- (docs/protocol.md, Errors): change their text only with the protocol.
-- Redis runs a script's whole body at every call, so each `local function` is made anew
-- each time (a closure: an allocation, and one more step for each local it captures). The
-- helpers of the common path are made so; those of errors and other rare paths are made
-- at their first use, by rare(): a call that meets none of them makes rare alone.
local MAXMS = 1000000000000000 -- 10^15: the largest ms any argument or setting takes

-- Effects replication, before the first write: Redis 7 and Valkey always replicate a
-- script's effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end

-- int(v, lo, hi): the decimal integer v when it is one in lo..hi, else nil (-0 reads as 0).
-- "0" and "1", the common counts and flags, are read without a pattern or tonumber()
local function int(v, lo, hi)
  local x
  if v == '0' then
    x = 0
  elseif v == '1' then
    x = 1
  else
    if type(v) ~= 'string' or not string.find(v, '^%-?%d+$') then return nil end
    x = tonumber(v)
    if x == nil then return nil end
    if x == 0 then x = 0 end
  end
  if x < lo or x > hi then return nil end
  return x
end
-- S(x): an integer as a decimal string. Numbers go to redis.call() as such strings:
-- Redis 7.0 formats a Lua number argument with printf("%.17g"), several times slower.
-- So does Lua when it joins a number into a string (`'h:' .. 5`): S(x) there too
local function S(x) return string.format('%d', x) end
-- num(v, def): a setting read from a hash as a finite number, def when it is not one
local function num(v, def)
  v = tonumber(v)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return def end
  return v
end
-- clock(): the Redis clock in ms, seconds * 1000 + floor(microseconds / 1000), and the
-- same as a decimal string (made from TIME's digits: one tonumber(), no string.format)
local function clock()
  local t = redis.call('TIME')
  local us = t[2]
  local l = #us
  local s
  if l == 6 then
    s = t[1] .. string.sub(us, 1, 3)
  elseif l > 3 then
    s = t[1] .. (l == 5 and '0' or '00') .. string.sub(us, 1, l - 3)
  else
    s = t[1] .. '000'
  end
  return tonumber(s), s
end

-- The rare path's helpers, made at the first call of rare() (see above)
local RARE = nil
local function rare()
  if RARE then return RARE end
  local R = {}
  -- bad(name, detail): the reply for an invalid argument
  function R.bad(name, detail)
    return redis.error_reply('ERR jobqueue: invalid ' .. name .. ': ' .. detail)
  end
  -- shown(v): an argument as an error quotes it: "v" (40 bytes at most, control bytes as
  -- ?) or missing
  function R.shown(v)
    if v == nil or v == false then return 'missing' end
    if #v > 40 then v = string.sub(v, 1, 40) .. '...' end
    return '"' .. (string.gsub(v, '%c', '?')) .. '"'
  end
  -- perJob(n, at, width, unit, fields): for a script given n jobs, each as a unit of width
  -- ARGV (named by fields) after ARGV[at] and a job key after the 7 queue keys: the error
  -- when ARGV or KEYS does not hold exactly that many, else nil
  function R.perJob(n, at, width, unit, fields)
    if #ARGV ~= at + width * n then
      return R.bad('n', 'n=' .. n .. ' needs exactly ' .. n .. ' ' .. unit .. 's (' .. fields ..
        ') after ARGV[' .. at .. '], got ' .. math.max(#ARGV - at, 0) .. ' arguments')
    end
    if #KEYS ~= 7 + n then
      return R.bad('keys', 'n=' .. n .. ' needs ' .. (7 + n) ..
        ' keys (7 queue keys + one job key per ' .. unit .. '), got ' .. #KEYS)
    end
    return nil
  end
  -- wrongtype(key, want[, t]): the reply for a key that holds type t (read when not given)
  -- where want was expected
  function R.wrongtype(key, want, t)
    if not t then
      t = redis.call('TYPE', key)
      if type(t) == 'table' then t = t.ok end
    end
    return redis.error_reply('ERR jobqueue: key ' .. key .. ' holds the wrong type (' ..
      tostring(t) .. '), expected ' .. want)
  end
  -- keepAside(key, ids, nowS): ids whose job hash is absent go to the orphans zset, scored
  -- the time they were set aside: an id set aside earlier keeps its first time; one purge
  -- forgot (a negative score) is set aside anew
  function R.keepAside(key, ids, nowS)
    if #ids == 0 then return end
    local s = redis.call('ZMSCORE', key, unpack(ids))
    local z = {}
    for i = 1, #ids do
      if not s[i] or tonumber(s[i]) < 0 then
        z[#z + 1] = nowS
        z[#z + 1] = ids[i]
      end
    end
    if #z > 0 then redis.call('ZADD', key, unpack(z)) end
  end
  -- wrongTyped(r): true when r, a redis.pcall() reply, is a WRONGTYPE error: a job key
  -- that is not a hash, which claim and reap set aside like an absent hash
  function R.wrongTyped(r)
    return type(r) == 'table' and r.err ~= nil and string.find(r.err, 'WRONGTYPE', 1, true) ~= nil
  end
  RARE = R
  return R
end
-- failure(r, key, want): the error of a failed redis.pcall() reply r, naming key when it
-- holds the wrong type; nil when r is not an error
local function failure(r, key, want)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return rare().wrongtype(key, want) end
    return redis.error_reply(r.err)
  end
  return nil
end
-- expect(key, want): nil when key is absent or of type want, else the wrongtype reply;
-- for keys a call writes without having read them
local function expect(key, want)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  if t == want or t == 'none' then return nil end
  return rare().wrongtype(key, want, t)
end
