-- The helpers every script shares. Error replies are part of the protocol
-- (docs/protocol.md, Errors): change their text only with the protocol.
local MAXMS = 1000000000000000 -- 10^15: the largest ms any argument or setting takes

-- bad(name, detail): the reply for an invalid argument
local function bad(name, detail)
  return redis.error_reply('ERR jobqueue: invalid ' .. name .. ': ' .. detail)
end
-- shown(v): an argument as an error quotes it: "v" (40 bytes at most, control bytes as ?)
-- or missing
local function shown(v)
  if v == nil or v == false then return 'missing' end
  if #v > 40 then v = string.sub(v, 1, 40) .. '...' end
  return '"' .. (string.gsub(v, '%c', '?')) .. '"'
end
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
local function S(x) return string.format('%d', x) end
-- num(v, def): a setting read from a hash as a finite number, def when it is not one
local function num(v, def)
  v = tonumber(v)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return def end
  return v
end

-- perJob(n, at, width, unit, fields): for a script given n jobs, each as a unit of width
-- ARGV (named by fields) after ARGV[at] and a job key after the 7 queue keys: the error
-- when ARGV or KEYS does not hold exactly that many, else nil
local function perJob(n, at, width, unit, fields)
  if #ARGV ~= at + width * n then
    return bad('n', 'n=' .. n .. ' needs exactly ' .. n .. ' ' .. unit .. 's (' .. fields ..
      ') after ARGV[' .. at .. '], got ' .. math.max(#ARGV - at, 0) .. ' arguments')
  end
  if #KEYS ~= 7 + n then
    return bad('keys', 'n=' .. n .. ' needs ' .. (7 + n) ..
      ' keys (7 queue keys + one job key per ' .. unit .. '), got ' .. #KEYS)
  end
  return nil
end

-- wrongtype(key, want[, t]): the reply for a key that holds type t (read when not given)
-- where want was expected
local function wrongtype(key, want, t)
  if not t then
    t = redis.call('TYPE', key)
    if type(t) == 'table' then t = t.ok end
  end
  return redis.error_reply('ERR jobqueue: key ' .. key .. ' holds the wrong type (' ..
    tostring(t) .. '), expected ' .. want)
end
-- expect(key, want): nil when key is absent or of type want, else the wrongtype reply;
-- for keys a call writes without having read them
local function expect(key, want)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  if t == want or t == 'none' then return nil end
  return wrongtype(key, want, t)
end
-- failure(r, key, want): the error of a failed redis.pcall() reply r, naming key when it
-- holds the wrong type; nil when r is not an error
local function failure(r, key, want)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return wrongtype(key, want) end
    return redis.error_reply(r.err)
  end
  return nil
end

-- effects(): before the first write. Redis 7 and Valkey always replicate effects; 6.2
-- (no REDIS_VERSION_NUM) is told to
local function effects()
  if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
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
-- keepAside(key, ids, nowS): ids whose job hash is absent go to the orphans zset, scored
-- the time they were set aside: an id set aside earlier keeps its first time; one purge
-- forgot (a negative score) is set aside anew
local function keepAside(key, ids, nowS)
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
-- wrongTyped(r): true when r, a redis.pcall() reply, is a WRONGTYPE error: a job key that
-- is not a hash, which claim and reap set aside like an absent hash
local function wrongTyped(r)
  return type(r) == 'table' and r.err ~= nil and string.find(r.err, 'WRONGTYPE', 1, true) ~= nil
end
-- earliest(key): the run-at (ms) of the delayed zset's first entry, nil when it is empty;
-- as a second value the error reply when key holds another type
local function earliest(key)
  local r = redis.pcall('ZRANGE', key, '0', '0', 'WITHSCORES')
  local e = failure(r, key, 'zset')
  if e then return nil, e end
  if #r == 0 then return nil end
  return tonumber(r[2])
end
-- wakeEarlier(kWake, before, at): one wake marker when a job just delayed until at runs
-- before every job delayed earlier (before: their earliest run-at, nil when none), so a
-- waiting worker re-reads the earliest run-at instead of sleeping to its next poll
local function wakeEarlier(kWake, before, at)
  if at and (before == nil or at < before) then
    redis.call('LPUSH', kWake, '1')
    redis.call('LTRIM', kWake, '0', '1023')
  end
end
-- ownRun(tmo, vis): whether a job's stored timeout_ms or visibility_timeout_ms (its
-- per-job options, docs/protocol.md) is one, an integer 1..10^15 ms. Such a job's leases
-- and run times are its own: the scripts count its acks' processing times, its expired
-- leases and its stale calls also apart (own_h:<b>, own_reaped, own_stale), which the
-- queue's visibility tuning (auto) takes out of what it learns from
local function ownRun(tmo, vis)
  if (tmo and int(tmo, 1, MAXMS)) or (vis and int(vis, 1, MAXMS)) then return true end
  return false
end
