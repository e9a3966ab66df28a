--[[
  reap: end expired leases (requeue or dead-letter) and trim the dead set.

  KEYS[1] P:{T}:pending      LIST  requeued jobs are RPUSHed (served next)
  KEYS[2] P:{T}:processing   ZSET  expired leases are read and removed
  KEYS[3] P:{T}:delayed      (not touched)
  KEYS[4] P:{T}:dead         ZSET  dead-lettered jobs (scored now), trimmed
  KEYS[5] P:{T}:meta         HASH  max_attempts, dead_retention_ms, dead_max_len
  KEYS[6] P:{T}:stats        HASH  counters reaped, dead_lettered, dead_trimmed, orphans
  KEYS[7] P:{T}:wake         LIST  one marker per requeued job, trimmed to 1024

  ARGV[1]  job-key prefix P:{T}:job:  (job keys are built as ARGV[1]..id)
  ARGV[2]  batch, 1..1000: the most processing entries examined

  Returns: {requeued, dead_lettered, more}, three integers; more is 1 when a lease with
           lease_until <= now is still in processing after this call.

  Takes up to batch entries with score <= now, earliest first. For each, the job hash
  decides: hash gone or status not `processing` -> entry removed, counted in
  `orphans`; hash lease_until > now -> entry re-scored to it, nothing else; attempts >=
  max_attempts (below 1 counts as 1) -> dead with last_error "lease expired"; otherwise
  back to the front of pending with a wake marker. claim_token and lease_until are
  removed from every job whose lease ends. Then trims dead, oldest died_at first, at most
  1000 entries per call: died_at < now - dead_retention_ms, then beyond dead_max_len
  (0 = no limit of that kind); a trimmed dead job's hash is deleted (`dead_trimmed`), an
  entry whose hash is gone or not `dead` is only removed (`orphans`).
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

local function num(v, def)
  v = tonumber(v)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return def end
  return v
end

-- arguments ------------------------------------------------------------------
if #KEYS ~= 7 then
  return bad('keys', 'expected the 7 queue keys, got ' .. #KEYS)
end
if #ARGV ~= 2 then
  return bad('arguments', 'expected 2 (prefix, batch), got ' .. #ARGV)
end
local batch = int(ARGV[2], 1, 1000)
if not batch then
  return bad('batch', 'expected an integer 1..1000, got ' .. shown(ARGV[2]))
end

local K_PENDING, K_PROCESSING, K_DEAD = KEYS[1], KEYS[2], KEYS[4]
local K_META, K_STATS, K_WAKE = KEYS[5], KEYS[6], KEYS[7]
local prefix = ARGV[1]
local TRIM_MAX = 1000

-- Redis 7 and Valkey always replicate effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- numbers go to redis.call() as decimal strings made here: Redis 7.0 formats a Lua
-- number argument with printf("%.17g"), several times slower than this
local nowS = string.format('%d', now)

-- read phase -----------------------------------------------------------------
local m = redis.pcall('HMGET', K_META, 'max_attempts', 'dead_retention_ms', 'dead_max_len')
local e = failure(m, K_META, 'hash')
if e then return e end
local maxAtt = math.floor(num(m[1], 5))
if maxAtt < 1 then maxAtt = 1 end
local retention = num(m[2], 604800000)
if retention < 0 then retention = 604800000 end
retention = math.floor(retention)
local maxLen = num(m[3], 10000)
if maxLen < 0 then maxLen = 10000 end
maxLen = math.floor(maxLen)

local due = redis.pcall('ZRANGEBYSCORE', K_PROCESSING, '-inf', nowS, 'LIMIT', '0', S(batch))
e = failure(due, K_PROCESSING, 'zset')
if e then return e end

local gone = {}            -- entries leaving processing
local rescore = {}         -- score, id pairs
local requeue, requeueKeys = {}, {}
local dead, deadKeys, deadSet = {}, {}, {}
local orphans = 0
for i = 1, #due do
  local id = due[i]
  local key = prefix .. id
  local h = redis.pcall('HMGET', key, 'status', 'lease_until', 'attempts')
  e = failure(h, key, 'hash')
  if e then return e end
  local st, luS, attS = h[1], h[2], h[3]
  if st ~= 'processing' then
    orphans = orphans + 1
    gone[#gone + 1] = id
  else
    local lu = tonumber(luS)
    if lu and lu > now then
      -- an integral score goes as a string (see nowS), anything else as it is
      if lu == math.floor(lu) and lu < 9007199254740992 then lu = S(lu) end
      rescore[#rescore + 1] = lu
      rescore[#rescore + 1] = id
    elseif num(attS, 0) >= maxAtt then
      gone[#gone + 1] = id
      dead[#dead + 1] = id
      deadKeys[#deadKeys + 1] = key
      deadSet[id] = true
    else
      gone[#gone + 1] = id
      requeue[#requeue + 1] = id
      requeueKeys[#requeueKeys + 1] = key
    end
  end
end

-- dead trimming plan, computed on the state this call leaves behind: the entries
-- dead-lettered now are the newest ones (died_at = now).
local nd = #dead
local trim, trimSet = {}, {}
local trimNew = 0          -- how many of this call's dead-lettered jobs are trimmed too
local deadChecked = false
if retention > 0 or maxLen > 0 then
  local rawCount = 0
  if retention > 0 then
    local r = redis.pcall('ZRANGEBYSCORE', K_DEAD, '-inf', string.format('(%d', now - retention),
      'LIMIT', '0', S(TRIM_MAX + nd))
    e = failure(r, K_DEAD, 'zset')
    if e then return e end
    deadChecked = true
    rawCount = #r
    for i = 1, rawCount do
      local id = r[i]
      if not deadSet[id] and #trim < TRIM_MAX then
        trim[#trim + 1] = id
        trimSet[id] = true
      end
    end
  end
  if maxLen > 0 and #trim < TRIM_MAX then
    local card = redis.pcall('ZCARD', K_DEAD)
    e = failure(card, K_DEAD, 'zset')
    if e then return e end
    deadChecked = true
    local already = 0
    if nd > 0 then
      local s = redis.call('ZMSCORE', K_DEAD, unpack(dead))
      for i = 1, nd do
        if s[i] then already = already + 1 end
      end
    end
    local over = card + nd - already - #trim - maxLen
    local want = math.min(over, TRIM_MAX - #trim)
    if want > 0 then
      local r = redis.call('ZRANGE', K_DEAD, '0', S(rawCount + nd + want - 1))
      local got = 0
      for i = 1, #r do
        if got == want then break end
        local id = r[i]
        if not trimSet[id] and not deadSet[id] then
          trim[#trim + 1] = id
          trimSet[id] = true
          got = got + 1
        end
      end
      trimNew = want - got   -- older entries ran out: trim some of the new ones
    end
  end
end

-- job hashes of the trimmed entries: the status decides whether the hash goes
local trimDel = {}
local trimmed = 0
for i = 1, #trim do
  local key = prefix .. trim[i]
  local s = redis.pcall('HGET', key, 'status')
  e = failure(s, key, 'hash')
  if e then return e end
  if s == 'dead' then
    trimDel[#trimDel + 1] = key
    trimmed = trimmed + 1
  else
    orphans = orphans + 1
  end
end

-- type checks for keys written without having been read
local nr = #requeue
if nr > 0 then
  e = expect(K_PENDING, 'list') or expect(K_WAKE, 'list')
  if e then return e end
end
if nd > 0 and not deadChecked then
  e = expect(K_DEAD, 'zset')
  if e then return e end
end
if nr > 0 or nd > 0 or orphans > 0 or #trim > 0 then
  e = expect(K_STATS, 'hash')
  if e then return e end
end

-- write phase ----------------------------------------------------------------
if #gone > 0 then redis.call('ZREM', K_PROCESSING, unpack(gone)) end
if #rescore > 0 then redis.call('ZADD', K_PROCESSING, unpack(rescore)) end
if nr > 0 then
  -- RPUSH in reverse so that the earliest expired lease is served first
  local rev = {}
  for i = nr, 1, -1 do rev[#rev + 1] = requeue[i] end
  redis.call('RPUSH', K_PENDING, unpack(rev))
  for i = 1, nr do
    redis.call('HDEL', requeueKeys[i], 'claim_token', 'lease_until')
    redis.call('HSET', requeueKeys[i], 'status', 'pending')
  end
  local marks = {}
  for i = 1, nr do marks[i] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(marks))
  redis.call('LTRIM', K_WAKE, '0', '1023')
end
if nd > 0 then
  local z = {}
  for i = 1, nd do
    z[2 * i - 1] = nowS
    z[2 * i] = dead[i]
  end
  redis.call('ZADD', K_DEAD, unpack(z))
  for i = 1, nd do
    redis.call('HDEL', deadKeys[i], 'claim_token', 'lease_until')
    redis.call('HSET', deadKeys[i], 'status', 'dead', 'last_error', 'lease expired')
  end
end
if #trim > 0 then
  redis.call('ZREM', K_DEAD, unpack(trim))
  if #trimDel > 0 then redis.call('DEL', unpack(trimDel)) end
end
if trimNew > 0 then
  -- only this call's dead-lettered jobs remain to trim: take the oldest of them
  local r = redis.call('ZRANGE', K_DEAD, '0', S(trimNew - 1))
  local keys = {}
  for i = 1, #r do keys[i] = prefix .. r[i] end
  if #r > 0 then
    redis.call('ZREM', K_DEAD, unpack(r))
    redis.call('DEL', unpack(keys))
    trimmed = trimmed + #r
  end
end

-- counters use pcall: stats was type-checked before the first write, and a counter
-- holding a non-number must not fail a call whose changes are already made
if nr > 0 then redis.pcall('HINCRBY', K_STATS, 'reaped', S(nr)) end
if nd > 0 then redis.pcall('HINCRBY', K_STATS, 'dead_lettered', S(nd)) end
if trimmed > 0 then redis.pcall('HINCRBY', K_STATS, 'dead_trimmed', S(trimmed)) end
if orphans > 0 then redis.pcall('HINCRBY', K_STATS, 'orphans', S(orphans)) end

local more = 0
if #due == batch then
  local c = redis.call('ZCOUNT', K_PROCESSING, '-inf', nowS)
  if c > 0 then more = 1 end
end
return { nr, nd, more }
