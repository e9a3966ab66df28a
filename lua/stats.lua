--[[
  stats: queue sizes and counters, read-only.

  KEYS[1] P:{T}:pending      LIST  LLEN
  KEYS[2] P:{T}:processing   ZSET  ZCARD, and ZCOUNT of leases past due
  KEYS[3] P:{T}:delayed      ZSET  ZCARD (due and not yet due)
  KEYS[4] P:{T}:dead         ZSET  ZCARD
  KEYS[5] P:{T}:meta         (not touched)
  KEYS[6] P:{T}:stats        HASH  every field
  KEYS[7] P:{T}:wake         (not touched)

  ARGV[1]  job-key prefix P:{T}:job: (not used; ARGV may be empty)

  Returns: a flat array name, value, ...: pending, processing (every lease, expired ones
           too), expired (lease_until <= now), delayed, dead, then every field of the
           stats hash (counters never incremented are absent; h:<b> fields in any
           order). Every value is an integer.
]]

local MAXMS = 1000000000000000

local function bad(name, detail)
  return redis.error_reply('ERR jobqueue: invalid ' .. name .. ': ' .. detail)
end
local function shown(v)
  if v == nil or v == false then return 'missing' end
  if #v > 40 then v = string.sub(v, 1, 40) .. '...' end
  return '"' .. (string.gsub(v, '%c', '?')) .. '"'
end
local function int(v, lo, hi)
  if type(v) ~= 'string' or not string.find(v, '^%-?%d+$') then return nil end
  local x = tonumber(v)
  if x == nil or x < lo or x > hi then return nil end
  if x == 0 then x = 0 end
  return x
end
local function wrongtype(key, want)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  return redis.error_reply('ERR jobqueue: key ' .. key .. ' holds the wrong type (' ..
    tostring(t) .. '), expected ' .. want)
end
local function expect(key, want)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  if t == want or t == 'none' then return nil end
  return redis.error_reply('ERR jobqueue: key ' .. key .. ' holds the wrong type (' ..
    tostring(t) .. '), expected ' .. want)
end
local function failure(r, key, want)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return wrongtype(key, want) end
    return redis.error_reply(r.err)
  end
  return nil
end

if #KEYS ~= 7 then
  return bad('keys', 'expected the 7 queue keys, got ' .. #KEYS)
end

local K_PENDING, K_PROCESSING, K_DELAYED, K_DEAD, K_STATS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowS = string.format('%d', now) -- a decimal string: cheaper for Redis than a Lua number

local out = {}
local e
local function put(name, key, want, ...)
  local r = redis.pcall(...)
  e = failure(r, key, want)
  out[#out + 1] = name
  out[#out + 1] = r
end

put('pending', K_PENDING, 'list', 'LLEN', K_PENDING)
if e then return e end
put('processing', K_PROCESSING, 'zset', 'ZCARD', K_PROCESSING)
if e then return e end
put('expired', K_PROCESSING, 'zset', 'ZCOUNT', K_PROCESSING, '-inf', nowS)
if e then return e end
put('delayed', K_DELAYED, 'zset', 'ZCARD', K_DELAYED)
if e then return e end
put('dead', K_DEAD, 'zset', 'ZCARD', K_DEAD)
if e then return e end
local h = redis.pcall('HGETALL', K_STATS)
e = failure(h, K_STATS, 'hash')
if e then return e end
for i = 1, #h, 2 do
  out[#out + 1] = h[i]
  out[#out + 1] = math.floor(tonumber(h[i + 1]) or 0)
end
return out
