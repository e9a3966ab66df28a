--[[
  extend: push back the lease of jobs the caller holds.

  KEYS[1] P:{T}:pending      (not touched)
  KEYS[2] P:{T}:processing   ZSET  id -> new lease_until
  KEYS[3] P:{T}:delayed      (not touched)
  KEYS[4] P:{T}:dead         (not touched)
  KEYS[5] P:{T}:meta         HASH  visibility_timeout_ms (read when ARGV[2] is 0)
  KEYS[6] P:{T}:stats        HASH  counter stale
  KEYS[7] P:{T}:wake         (not touched)
  KEYS[7+i]                  job key of the i-th pair (ARGV[1]..id), i = 1..n

  ARGV[1]        job-key prefix P:{T}:job:
  ARGV[2]        ms, the new lease length from now, 0..10^15 (0 = meta visibility_timeout_ms)
  ARGV[3]        n, 1..1000
  ARGV[4..3+2n]  n pairs: id, token

  Returns: an array of n integers, in pair order: the new lease_until, or 0 when stale.

  A pair is accepted when the job's status is `processing` and its claim_token equals the
  token (an expired lease not reaped yet is still accepted). lease_until = now + ms is
  written both as the processing score and the hash's lease_until. Anything else counts
  `stale` and changes nothing else.
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

-- arguments ------------------------------------------------------------------
local ms = int(ARGV[2], 0, MAXMS)
if not ms then return bad('ms', 'expected an integer 0..10^15, got ' .. shown(ARGV[2])) end
local n = int(ARGV[3], 1, 1000)
if not n then return bad('n', 'expected an integer 1..1000, got ' .. shown(ARGV[3])) end
if #ARGV ~= 3 + 2 * n then
  return bad('n', 'n=' .. n .. ' needs exactly ' .. n .. ' pairs (id, token) after ARGV[3], got ' ..
    math.max(#ARGV - 3, 0) .. ' arguments')
end
if #KEYS ~= 7 + n then
  return bad('keys', 'n=' .. n .. ' needs ' .. (7 + n) .. ' keys (7 queue keys + one job key per pair), got ' .. #KEYS)
end

local K_PROCESSING, K_META, K_STATS = KEYS[2], KEYS[5], KEYS[6]

-- Redis 7 and Valkey always replicate effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- read phase -----------------------------------------------------------------
local res, acc = {}, {}
local stale = 0
local e
for i = 1, n do
  local key = KEYS[7 + i]
  local h = redis.pcall('HMGET', key, 'claim_token', 'status')
  e = failure(h, key, 'hash')
  if e then return e end
  if h[2] == 'processing' and h[1] == ARGV[3 + 2 * i] then
    acc[#acc + 1] = i
  else
    res[i] = 0
    stale = stale + 1
  end
end

local na = #acc
if na == 0 then
  local r = redis.pcall('HINCRBY', K_STATS, 'stale', stale)
  if type(r) == 'table' and r.err and string.find(r.err, 'WRONGTYPE', 1, true) then
    return wrongtype(K_STATS, 'hash')
  end
  return res
end

if ms == 0 then
  local m = redis.pcall('HMGET', K_META, 'visibility_timeout_ms')
  e = failure(m, K_META, 'hash')
  if e then return e end
  ms = tonumber(m[1])
  if ms == nil or ms ~= ms or ms < 1 then ms = 30000 end
  if ms > MAXMS then ms = MAXMS end
  ms = math.floor(ms)
end
local lease = now + ms
-- a decimal string: Redis 7.0 formats a Lua number argument with printf("%.17g")
local leaseS = string.format('%d', lease)

if stale > 0 then
  e = expect(K_STATS, 'hash')
  if e then return e end
end

-- write phase (the first write reveals a wrong-typed processing key) -------------
local z = {}
for j = 1, na do
  z[2 * j - 1] = leaseS
  z[2 * j] = ARGV[2 + 2 * acc[j]]
end
local r = redis.pcall('ZADD', K_PROCESSING, unpack(z))
e = failure(r, K_PROCESSING, 'zset')
if e then return e end
for j = 1, na do
  local i = acc[j]
  redis.call('HSET', KEYS[7 + i], 'lease_until', leaseS)
  res[i] = lease
end
-- counters use pcall: stats was type-checked before the first write, and a counter
-- holding a non-number must not fail a call whose changes are already made
if stale > 0 then redis.pcall('HINCRBY', K_STATS, 'stale', stale) end
return res
