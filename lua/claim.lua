--[[
  claim: lease up to n ready jobs to one worker.

  KEYS[1] P:{T}:pending      LIST  ids ready to claim (RPOP end is the front)
  KEYS[2] P:{T}:processing   ZSET  id -> lease_until
  KEYS[3] P:{T}:delayed      ZSET  id -> run_at
  KEYS[4] P:{T}:dead         ZSET  (not touched)
  KEYS[5] P:{T}:meta         HASH  visibility_timeout_ms (read when ARGV[4] is 0)
  KEYS[6] P:{T}:stats        HASH  counters claimed, orphans
  KEYS[7] P:{T}:wake         LIST  (not touched: claim pushes no wake markers)

  ARGV[1]        job-key prefix P:{T}:job:  (job keys are built as ARGV[1]..id)
  ARGV[2]        n, the most jobs to claim, 1..1000
  ARGV[3]        worker id, stored in the job's `worker` field
  ARGV[4]        visibility in ms, 0..10^15 (0 = meta visibility_timeout_ms, default 30000)
  ARGV[5..4+n]   exactly n tokens, one per slot, in slot order

  Returns: an array of up to n jobs, each {id, payload, attempts, token, lease_until}
           (attempts and lease_until are integers); an empty array when nothing is ready.

  First moves up to 100 due delayed jobs (earliest run_at first) to the back of pending;
  a due delayed id whose hash is gone or whose status is not `delayed` is dropped from
  delayed and counted in `orphans`. Then takes ids from the front of pending; an id whose
  hash is gone or whose status is not `pending` is dropped, counted in `orphans`, and
  does not use a slot; at most n + 100 ids leave pending per call.
  A failed call leaves every key as it was: a wrong-typed key is found by the first
  command on it, and what the call changed before (the RPOP of pending, the first
  counter) is undone before it fails.
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

-- arguments ------------------------------------------------------------------
if #KEYS ~= 7 then
  return bad('keys', 'expected the 7 queue keys, got ' .. #KEYS)
end
local n = int(ARGV[2], 1, 1000)
if not n then return bad('n', 'expected an integer 1..1000, got ', ARGV[2]) end
-- n as Redis reads a count: ARGV[2] itself unless written with leading zeros
local nS = ARGV[2]
if string.byte(nS, 1) == 48 then nS = S(n) end
if #ARGV ~= 4 + n then
  return bad('n', 'n=' .. n .. ' needs exactly ' .. n .. ' tokens after ARGV[4], got ' ..
    math.max(#ARGV - 4, 0) .. ' tokens')
end
local vis = int(ARGV[4], 0, MAXMS)
if not vis then
  return bad('visibility', 'expected an integer 0..10^15 ms, got ', ARGV[4])
end

local K_PENDING, K_PROCESSING, K_DELAYED = KEYS[1], KEYS[2], KEYS[3]
local K_META, K_STATS = KEYS[5], KEYS[6]
local prefix, worker = ARGV[1], ARGV[3]

-- Redis 7 and Valkey always replicate effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- numbers go to redis.call() as decimal strings made here: Redis 7.0 formats a Lua
-- number argument with printf("%.17g"), several times slower than this
local nowS = string.format('%d', now)

-- reads (delayed) ------------------------------------------------------------
local orphans = 0

-- due delayed jobs, earliest first, at most 100 (orphans included)
local due = redis.pcall('ZRANGEBYSCORE', K_DELAYED, '-inf', nowS, 'LIMIT', '0', '100')
-- a reply that is always a table is checked for .err directly: cheaper than failure()
if due.err then return failure(due, K_DELAYED, 'zset') end
local e
local promo, promoAtt, promoSet = due, nil, due -- empty unless something is due
if #due > 0 then promo, promoAtt, promoSet = {}, {}, {} end
for i = 1, #due do
  local id = due[i]
  local key = prefix .. id
  local h = redis.pcall('HMGET', key, 'status', 'attempts')
  if h.err then return failure(h, key, 'hash') end
  if h[1] == 'delayed' then
    promo[#promo + 1] = id
    promoAtt[#promo] = h[2]
    promoSet[id] = true
  else
    orphans = orphans + 1
  end
end

-- ids leave pending from its RPOP end: first the ids already there, then the
-- promoted ones (they go behind them). The first RPOP is the first write of the call:
-- it reveals a wrong-typed pending key before anything changed, and if a later check
-- fails, undo() pushes the popped ids back where they were.
local cIds, cKeys, cAtt, cPay = {}, {}, {}, {}
local taken = {}
local pops = {}            -- the RPOP replies, in order
local budget = n + 100
local popped, promoUsed = 0, 0
local pendingDone = false

local function undo(err)
  local back = {}
  for b = #pops, 1, -1 do
    local ids = pops[b]
    for i = #ids, 1, -1 do back[#back + 1] = ids[i] end
  end
  if #back > 0 then redis.call('RPUSH', K_PENDING, unpack(back)) end
  return err
end

while #cIds < n and popped < budget do
  if not pendingDone then
    local want = n - #cIds
    if budget - popped < want then want = budget - popped end
    local ids = redis.pcall('RPOP', K_PENDING, want == n and nS or S(want))
    if not ids then
      ids = {}
    elseif ids.err then
      return undo(failure(ids, K_PENDING, 'list'))
    end
    pops[#pops + 1] = ids
    popped = popped + #ids
    if #ids < want then pendingDone = true end
    for j = 1, #ids do
      local id = ids[j]
      local key = prefix .. id
      local h = redis.pcall('HMGET', key, 'status', 'attempts', 'payload')
      if h.err then return undo(failure(h, key, 'hash')) end
      local st, att, pay = h[1], h[2], h[3]
      if promoSet[id] and st == 'delayed' then st = 'pending' end -- promoted before the pop
      if st == 'pending' and not taken[key] then
        taken[key] = true
        local c = #cIds + 1
        cIds[c], cKeys[c], cAtt[c], cPay[c] = id, key, att, pay or ''
      else
        orphans = orphans + 1
      end
    end
  else
    if promoUsed >= #promo then break end
    promoUsed = promoUsed + 1
    popped = popped + 1
    local id = promo[promoUsed]
    local key = prefix .. id
    if taken[key] then
      orphans = orphans + 1 -- already claimed through an older copy in pending
    else
      taken[key] = true
      local c = #cIds + 1
      cIds[c], cKeys[c], cAtt[c], cPay[c] = id, key, promoAtt[promoUsed], false
    end
  end
end

local nc = #cIds
local lease, leaseS = 0, nil
if nc > 0 then
  if vis == 0 then
    local m = redis.pcall('HMGET', K_META, 'visibility_timeout_ms')
    if m.err then return undo(failure(m, K_META, 'hash')) end
    vis = tonumber(m[1])
    if vis == nil or vis ~= vis or vis < 1 then vis = 30000 end
    if vis > MAXMS then vis = MAXMS end
    vis = math.floor(vis)
  end
  lease = now + vis
  leaseS = S(lease)
  for c = 1, nc do
    if cPay[c] == false then cPay[c] = redis.call('HGET', cKeys[c], 'payload') or '' end
  end
end

-- write phase ----------------------------------------------------------------
-- stats and processing are written without having been read. The first write to each
-- reveals a wrong type without changing it; what was written before is then undone
-- (the counter taken back, the popped ids pushed back) and the call fails.
local first, firstBy = nil, 0
if nc > 0 then
  first, firstBy = 'claimed', nc
elseif orphans > 0 then
  first, firstBy = 'orphans', orphans
end
if first then
  local r = redis.pcall('HINCRBY', K_STATS, first, firstBy == n and nS or S(firstBy))
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return undo(failure(r, K_STATS, 'hash')) end
    -- a counter holding a non-number must not fail the call; it stays as it is
    first = nil
  end
end
local function unstats(err)
  if first then
    -- a counter at zero was absent before (counters only ever grow)
    if redis.call('HINCRBY', K_STATS, first, S(-firstBy)) == 0 then
      redis.call('HDEL', K_STATS, first)
    end
  end
  return undo(err)
end

local out = {}
if nc > 0 then
  local z = {}
  for c = 1, nc do
    z[2 * c - 1] = leaseS
    z[2 * c] = cIds[c]
  end
  local r = redis.pcall('ZADD', K_PROCESSING, unpack(z))
  e = failure(r, K_PROCESSING, 'zset')
  if e then return unstats(e) end
end
if promoUsed < #promo then
  local rest = {}
  for i = promoUsed + 1, #promo do rest[#rest + 1] = promo[i] end
  redis.call('LPUSH', K_PENDING, unpack(rest))
  for i = 1, #rest do
    local key = prefix .. rest[i]
    if not taken[key] then redis.call('HSET', key, 'status', 'pending') end
  end
end
if #due > 0 then
  redis.call('ZREM', K_DELAYED, unpack(due))
end
for c = 1, nc do
  local att, attS = 1, '1' -- absent before the first claim
  if cAtt[c] then
    att = (tonumber(cAtt[c]) or 0) + 1
    attS = S(att)
  end
  local token = ARGV[4 + c]
  redis.call('HSET', cKeys[c], 'status', 'processing', 'claim_token', token,
    'attempts', attS, 'claimed_at', nowS, 'lease_until', leaseS, 'worker', worker)
  out[c] = { cIds[c], cPay[c], att, token, lease }
end
-- the second counter: stats is known to be a hash by now
if nc > 0 and orphans > 0 then redis.pcall('HINCRBY', K_STATS, 'orphans', S(orphans)) end
return out
