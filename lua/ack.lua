--[[
  ack: finish jobs whose lease the caller holds.

  KEYS[1] P:{T}:pending      (not touched)
  KEYS[2] P:{T}:processing   ZSET  acked ids are removed
  KEYS[3] P:{T}:delayed      (not touched)
  KEYS[4] P:{T}:dead         (not touched)
  KEYS[5] P:{T}:meta         HASH  completed_retention_ms (default 0 = delete the hash)
  KEYS[6] P:{T}:stats        HASH  counters acked, stale and histogram buckets h:<b>
  KEYS[7] P:{T}:wake         (not touched)
  KEYS[7+i]                  job key of the i-th pair (ARGV[1]..id), i = 1..n

  ARGV[1]        job-key prefix P:{T}:job:
  ARGV[2]        n, 1..1000
  ARGV[3..2+2n]  n pairs: id, token

  Returns: an array of n integers, in pair order: 1 acked, 0 stale.

  A pair is acked when the job's status is `processing` and its claim_token equals the
  token, even if the lease has expired but was not reaped yet. The job becomes `done`:
  claim_token and lease_until are removed and the hash is kept for
  completed_retention_ms (PEXPIRE) or deleted when that is 0. The processing time
  (now - claimed_at, ms) adds 1 to stats field h:<floor(log2(max(ms,1)))>.
  Anything else (wrong token, other status, hash gone, same job twice) counts `stale`
  and changes nothing else.
]]

local MAXMS = 1000000000000000

-- bad(name, detail[, v]): the argument error; with v, says what was given
local function bad(name, detail, ...)
  if select('#', ...) > 0 then
    local v = ...
    if v == nil or v == false then
      v = 'missing'
    else
      if #v > 40 then v = string.sub(v, 1, 40) .. '...' end
      v = '"' .. (string.gsub(v, '%c', '?')) .. '"'
    end
    detail = detail .. v
  end
  return redis.error_reply('ERR jobqueue: invalid ' .. name .. ': ' .. detail)
end
local function int(v, lo, hi)
  if type(v) ~= 'string' or not string.find(v, '^%-?%d+$') then return nil end
  local x = tonumber(v)
  if x == nil or x < lo or x > hi then return nil end
  if x == 0 then x = 0 end
  return x
end
local function S(x) return string.format('%d', x) end
-- the error of a failed redis.pcall() reply r, naming key when it holds the wrong type
local function failure(r, key, want)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then
      local t = redis.call('TYPE', key)
      if type(t) == 'table' then t = t.ok end
      return redis.error_reply('ERR jobqueue: key ' .. key .. ' holds the wrong type (' ..
        tostring(t) .. '), expected ' .. want)
    end
    return redis.error_reply(r.err)
  end
  return nil
end

-- floor(log2(max(ms, 1))) in exact arithmetic: halving a double is exact, so no
-- rounding can move a power of two into the wrong bucket
local function log2floor(ms)
  local b = 0
  if ms < 2 then return 0 end
  while ms >= 256 do
    ms = ms / 256
    b = b + 8
  end
  while ms >= 2 do
    ms = ms / 2
    b = b + 1
  end
  return b
end

-- arguments ------------------------------------------------------------------
local n = int(ARGV[2], 1, 1000)
if not n then return bad('n', 'expected an integer 1..1000, got ', ARGV[2]) end
-- n as Redis reads a count: ARGV[2] itself unless written with leading zeros
local nS = ARGV[2]
if string.byte(nS, 1) == 48 then nS = S(n) end
if #ARGV ~= 2 + 2 * n then
  return bad('n', 'n=' .. n .. ' needs exactly ' .. n .. ' pairs (id, token) after ARGV[2], got ' ..
    math.max(#ARGV - 2, 0) .. ' arguments')
end
if #KEYS ~= 7 + n then
  return bad('keys', 'n=' .. n .. ' needs ' .. (7 + n) .. ' keys (7 queue keys + one job key per pair), got ' .. #KEYS)
end

local K_PROCESSING, K_META, K_STATS = KEYS[2], KEYS[5], KEYS[6]

-- Redis 7 and Valkey always replicate effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- numbers go to redis.call() as decimal strings made by S(): Redis 7.0 formats a Lua
-- number argument with printf("%.17g"), several times slower

-- read phase -----------------------------------------------------------------
local res, ids, keys = {}, {}, {}
local done = {}
local buckets, blist = {}, {}
local stale = 0
local e
for i = 1, n do
  local key = KEYS[7 + i]
  local h = redis.pcall('HMGET', key, 'claim_token', 'status', 'claimed_at')
  if h.err then return failure(h, key, 'hash') end -- HMGET always replies with a table
  if h[2] == 'processing' and h[1] == ARGV[2 + 2 * i] and not done[key] then
    done[key] = true
    res[i] = 1
    ids[#ids + 1] = ARGV[1 + 2 * i]
    keys[#keys + 1] = key
    local b = log2floor(now - (tonumber(h[3]) or now))
    if buckets[b] then
      buckets[b] = buckets[b] + 1
    else
      buckets[b] = 1
      blist[#blist + 1] = b
    end
  else
    res[i] = 0
    stale = stale + 1
  end
end

local na = #ids
if na == 0 then
  -- only the stale counter changes: that single write reveals a wrong-typed stats key
  local r = redis.pcall('HINCRBY', K_STATS, 'stale', S(stale))
  if type(r) == 'table' and r.err and string.find(r.err, 'WRONGTYPE', 1, true) then
    return failure(r, K_STATS, 'hash')
  end
  return res
end

local retention = 0
do
  local m = redis.pcall('HMGET', K_META, 'completed_retention_ms')
  if m.err then return failure(m, K_META, 'hash') end
  retention = tonumber(m[1])
  if retention == nil or retention ~= retention or retention < 1 then
    retention = 0
  elseif retention > MAXMS then
    retention = MAXMS
  end
  retention = math.floor(retention)
end

-- write phase ----------------------------------------------------------------
-- stats and processing are written without having been read: the first write to each
-- reveals a wrong type without changing it, and the counter is taken back if processing
-- turns out to be the wrong type.
local counted = true
local r = redis.pcall('HINCRBY', K_STATS, 'acked', na == n and nS or S(na))
if type(r) == 'table' and r.err then
  if string.find(r.err, 'WRONGTYPE', 1, true) then return failure(r, K_STATS, 'hash') end
  counted = false -- a counter holding a non-number must not fail the call
end
r = redis.pcall('ZREM', K_PROCESSING, unpack(ids))
e = failure(r, K_PROCESSING, 'zset')
if e then
  -- a counter at zero was absent before (counters only ever grow)
  if counted and redis.call('HINCRBY', K_STATS, 'acked', S(-na)) == 0 then
    redis.call('HDEL', K_STATS, 'acked')
  end
  return e
end
if retention > 0 then
  local retentionS = S(retention)
  for i = 1, na do
    redis.call('HSET', keys[i], 'status', 'done')
    redis.call('HDEL', keys[i], 'claim_token', 'lease_until')
    redis.call('PEXPIRE', keys[i], retentionS)
  end
else
  redis.call('DEL', unpack(keys))
end
-- the other counters: stats is known to be a hash by now, and a counter holding a
-- non-number must not fail a call whose changes are already made
for i = 1, #blist do
  local b = blist[i]
  local c = buckets[b]
  redis.pcall('HINCRBY', K_STATS, 'h:' .. b, c == 1 and '1' or S(c))
end
if stale > 0 then redis.pcall('HINCRBY', K_STATS, 'stale', S(stale)) end
return res
