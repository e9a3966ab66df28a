--[[
  enqueue: add n jobs, each ready now or after a delay.

  KEYS[1] P:{T}:pending      LIST  jobs ready now are LPUSHed (claim RPOPs: FIFO)
  KEYS[2] P:{T}:processing   (not touched)
  KEYS[3] P:{T}:delayed      ZSET  delayed jobs, scored now + delay_ms
  KEYS[4] P:{T}:dead         (not touched)
  KEYS[5] P:{T}:meta         (not touched)
  KEYS[6] P:{T}:stats        HASH  counter enqueued
  KEYS[7] P:{T}:wake         LIST  one marker per job ready now, trimmed to 1024
  KEYS[7+i]                  job key of the i-th triple (ARGV[1]..id), i = 1..n

  ARGV[1]        job-key prefix P:{T}:job:
  ARGV[2]        n, 1..1000
  ARGV[3..2+3n]  n triples: id, payload (opaque bytes), delay_ms (0..10^15, 0 = ready now)

  Returns: an array of n integers, in triple order: 1 enqueued, 0 when the id is already
           there (its job hash exists, whatever its status, or it came earlier in this
           call); nothing changes for a refused id.

  A new job hash holds payload, status (`pending` or `delayed`) and enqueued_at (ms,
  Redis clock); `attempts` is absent until the first claim (absent counts as 0).
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
local function S(x) return string.format('%d', x) end
local function failure(r, key, want)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return wrongtype(key, want) end
    return redis.error_reply(r.err)
  end
  return nil
end

-- arguments ------------------------------------------------------------------
local n = int(ARGV[2], 1, 1000)
if not n then return bad('n', 'expected an integer 1..1000, got ' .. shown(ARGV[2])) end
if #ARGV ~= 2 + 3 * n then
  return bad('n', 'n=' .. n .. ' needs exactly ' .. n ..
    ' triples (id, payload, delay_ms) after ARGV[2], got ' .. math.max(#ARGV - 2, 0) .. ' arguments')
end
if #KEYS ~= 7 + n then
  return bad('keys', 'n=' .. n .. ' needs ' .. (7 + n) .. ' keys (7 queue keys + one job key per triple), got ' .. #KEYS)
end
local delays = {}
for i = 1, n do
  local d = int(ARGV[2 + 3 * i], 0, MAXMS)
  if not d then
    return bad('delay_ms', 'triple ' .. i .. ': expected an integer 0..10^15, got ' .. shown(ARGV[2 + 3 * i]))
  end
  delays[i] = d
end

local K_PENDING, K_DELAYED, K_STATS, K_WAKE = KEYS[1], KEYS[3], KEYS[6], KEYS[7]

-- read phase -----------------------------------------------------------------
local res = {}
local seen = {}
local ready, later, newKeys, newIdx = {}, {}, {}, {}
local e
-- one EXISTS over every job key: when none exists (the usual case) no key can hold the
-- wrong type and every id is new; otherwise each key's type is read
local jobKeys = {}
for i = 1, n do jobKeys[i] = KEYS[7 + i] end
local anyExists = redis.call('EXISTS', unpack(jobKeys)) > 0
for i = 1, n do
  local key = KEYS[7 + i]
  local ty = 'none'
  if anyExists then
    ty = redis.call('TYPE', key)
    if type(ty) == 'table' then ty = ty.ok end
    if ty ~= 'none' and ty ~= 'hash' then return wrongtype(key, 'hash') end
  end
  if ty == 'none' and not seen[key] then
    seen[key] = true
    res[i] = 1
    newKeys[#newKeys + 1] = key
    newIdx[#newIdx + 1] = i
  else
    res[i] = 0
  end
end
local nn = #newKeys
if nn == 0 then return res end

-- Redis 7 and Valkey always replicate effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- numbers go to redis.call() as decimal strings made here: Redis 7.0 formats a Lua
-- number argument with printf("%.17g"), several times slower than this
local nowS = string.format('%d', now)

for j = 1, nn do
  local i = newIdx[j]
  local id = ARGV[3 * i]
  if delays[i] > 0 then
    later[#later + 1] = S(now + delays[i])
    later[#later + 1] = id
  else
    ready[#ready + 1] = id
  end
end

-- type checks for keys written without having been read; the first write itself
-- reveals a wrong type for its key
e = expect(K_STATS, 'hash')
if e then return e end
if #ready > 0 then
  e = expect(K_WAKE, 'list')
  if e then return e end
  if #later > 0 then
    e = expect(K_DELAYED, 'zset')
    if e then return e end
  end
end

-- write phase ----------------------------------------------------------------
if #ready > 0 then
  local r = redis.pcall('LPUSH', K_PENDING, unpack(ready))
  e = failure(r, K_PENDING, 'list')
  if e then return e end
end
if #later > 0 then
  local r = redis.pcall('ZADD', K_DELAYED, unpack(later))
  e = failure(r, K_DELAYED, 'zset')
  if e then return e end
end
for j = 1, nn do
  local i = newIdx[j]
  local st = 'pending'
  if delays[i] > 0 then st = 'delayed' end
  -- no `attempts` field: absent reads as 0, and the hash stays in a smaller allocation
  redis.call('HSET', newKeys[j], 'payload', ARGV[3 * i + 1], 'status', st, 'enqueued_at', nowS)
end
if #ready > 0 then
  local marks = {}
  for j = 1, math.min(#ready, 1024) do marks[j] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(marks))
  redis.call('LTRIM', K_WAKE, '0', '1023')
end
-- counters use pcall: stats was type-checked before the first write, and a counter
-- holding a non-number must not fail a call whose changes are already made
redis.pcall('HINCRBY', K_STATS, 'enqueued', S(nn))
return res
