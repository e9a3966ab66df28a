--[[
  fail: end the caller's lease on a job that failed, retrying it or dead-lettering it.

  KEYS[1] P:{T}:pending      LIST  immediate retry goes here (LPUSH, back of the line)
  KEYS[2] P:{T}:processing   ZSET  the id is removed
  KEYS[3] P:{T}:delayed      ZSET  retry with a backoff goes here, scored now + backoff
  KEYS[4] P:{T}:dead         ZSET  dead-lettering goes here, scored now
  KEYS[5] P:{T}:meta         HASH  max_attempts, backoff_initial_ms, backoff_max_ms,
                                   backoff_multiplier
  KEYS[6] P:{T}:stats        HASH  counters failed, retried, dead_lettered, stale
  KEYS[7] P:{T}:wake         LIST  one marker when the job goes straight back to pending
  KEYS[8]                    the job key (ARGV[1]..id)

  ARGV[1]  job-key prefix P:{T}:job:
  ARGV[2]  id
  ARGV[3]  token
  ARGV[4]  error text, stored as last_error
  ARGV[5]  mode: `retry` or `dead`
  ARGV[6]  backoff ms, -1..10^15: -1 = meta policy, 0 = back to pending at once,
           > 0 = used as given

  Returns: the job's new status as a string, `pending`, `delayed` or `dead`, or
           `stale` when the caller does not hold the lease.

  The lease is held when status is `processing` and claim_token equals the token
  (expired but not reaped yet still counts). Mode `retry` with attempts < max_attempts
  (below 1 counts as 1) retries: with the meta policy the backoff is
  floor(backoff_initial_ms * backoff_multiplier^(attempts-1)) capped at backoff_max_ms.
  Otherwise, and always for mode `dead`, the job goes to dead. claim_token and
  lease_until are removed, last_error is set, `failed` counts every accepted call,
  plus `retried` or `dead_lettered` by outcome. A stale call only counts `stale`.
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

local function num(v, def)
  v = tonumber(v)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return def end
  return v
end

-- arguments ------------------------------------------------------------------
if #ARGV ~= 6 then
  return bad('arguments', 'expected 6 (prefix, id, token, error, mode, backoff), got ' .. #ARGV)
end
if #KEYS ~= 8 then
  return bad('keys', 'expected 8 keys (7 queue keys + the job key), got ' .. #KEYS)
end
local mode = ARGV[5]
if mode ~= 'retry' and mode ~= 'dead' then
  return bad('mode', 'expected "retry" or "dead", got ' .. shown(mode))
end
local backoff = int(ARGV[6], -1, MAXMS)
if not backoff then
  return bad('backoff', 'expected an integer -1..10^15, got ' .. shown(ARGV[6]))
end

local K_PENDING, K_PROCESSING, K_DELAYED, K_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_META, K_STATS, K_WAKE, key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local id, token, errtext = ARGV[2], ARGV[3], ARGV[4]

-- Redis 7 and Valkey always replicate effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- read phase -----------------------------------------------------------------
local h = redis.pcall('HMGET', key, 'claim_token', 'status', 'attempts')
local e = failure(h, key, 'hash')
if e then return e end
if not (h[2] == 'processing' and h[1] == token) then
  local r = redis.pcall('HINCRBY', K_STATS, 'stale', 1)
  if type(r) == 'table' and r.err and string.find(r.err, 'WRONGTYPE', 1, true) then
    return wrongtype(K_STATS, 'hash')
  end
  return 'stale'
end

local attempts = num(h[3], 0)
local outcome = 'dead'
if mode == 'retry' then
  local m
  if backoff == -1 then
    m = redis.pcall('HMGET', K_META, 'max_attempts', 'backoff_initial_ms',
      'backoff_max_ms', 'backoff_multiplier')
  else
    m = redis.pcall('HMGET', K_META, 'max_attempts')
  end
  e = failure(m, K_META, 'hash')
  if e then return e end
  local maxAtt = math.floor(num(m[1], 5))
  if maxAtt < 1 then maxAtt = 1 end
  if attempts < maxAtt then
    if backoff == -1 then
      local initial = num(m[2], 1000)
      if initial < 0 then initial = 1000 end
      local cap = num(m[3], 300000)
      if cap < 0 then cap = 300000 end
      local mult = num(m[4], 2)
      if mult < 0 then mult = 2 end
      local ex = attempts - 1
      if ex < 0 then ex = 0 end
      -- the nudge of 1e-12 (relative) keeps floor() from losing 1 where the product is
      -- whole in decimal but lands a hair below it in binary (1000 * 0.7^2 = 490)
      local b = initial * (mult ^ ex)
      if b ~= b or b > cap then b = cap end
      b = math.floor(b * (1 + 1e-12))
      if b > cap then b = math.floor(cap) end
      if b > MAXMS then b = MAXMS end
      backoff = b
    end
    if backoff == 0 then outcome = 'pending' else outcome = 'delayed' end
  end
end

-- type checks for keys written without having been read
e = expect(K_STATS, 'hash')
if e then return e end
if outcome == 'pending' then
  e = expect(K_PENDING, 'list') or expect(K_WAKE, 'list')
elseif outcome == 'delayed' then
  e = expect(K_DELAYED, 'zset')
else
  e = expect(K_DEAD, 'zset')
end
if e then return e end

-- write phase (the first write reveals a wrong-typed processing key) -------------
local r = redis.pcall('ZREM', K_PROCESSING, id)
e = failure(r, K_PROCESSING, 'zset')
if e then return e end
redis.call('HDEL', key, 'claim_token', 'lease_until')
redis.call('HSET', key, 'status', outcome, 'last_error', errtext)
-- counters use pcall: stats was type-checked before the first write, and a counter
-- holding a non-number must not fail a call whose changes are already made
redis.pcall('HINCRBY', K_STATS, 'failed', 1)
if outcome == 'pending' then
  redis.call('LPUSH', K_PENDING, id)
  redis.call('LPUSH', K_WAKE, '1')
  redis.call('LTRIM', K_WAKE, '0', '1023')
  redis.pcall('HINCRBY', K_STATS, 'retried', 1)
elseif outcome == 'delayed' then
  redis.call('ZADD', K_DELAYED, string.format('%d', now + backoff), id)
  redis.pcall('HINCRBY', K_STATS, 'retried', 1)
else
  redis.call('ZADD', K_DEAD, string.format('%d', now), id)
  redis.pcall('HINCRBY', K_STATS, 'dead_lettered', 1)
end
return outcome
