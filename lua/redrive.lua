--[[
  redrive: move dead jobs back to pending.

  KEYS[1] P:{T}:pending      LIST  redriven jobs are LPUSHed (as new arrivals)
  KEYS[2] P:{T}:processing   (not touched)
  KEYS[3] P:{T}:delayed      (not touched)
  KEYS[4] P:{T}:dead         ZSET  entries are removed
  KEYS[5] P:{T}:meta         (not touched)
  KEYS[6] P:{T}:stats        HASH  counters redriven, orphans
  KEYS[7] P:{T}:wake         LIST  one marker per redriven job, trimmed to 1024
  KEYS[7+i]                  `ids` form only: job key of the i-th id (ARGV[1]..id)

  ARGV[1]  job-key prefix P:{T}:job:  (the `oldest` form builds job keys as ARGV[1]..id)
  ARGV[2]  form: `ids` or `oldest`
  `ids`:    ARGV[3..] the ids, 1..1000 of them
  `oldest`: ARGV[3] n, 1..1000: the n dead entries with the lowest died_at

  Returns: the number of dead jobs moved back to pending (integer).

  Only jobs whose status is `dead` move: status `pending`, attempts 0, last_error kept,
  removed from dead, LPUSHed to pending with a wake marker. A dead entry whose hash is
  gone or whose status is not `dead` is removed from dead and counted in `orphans`
  (hash left alone); any other id is ignored and not counted.
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
local form = ARGV[2]
local ids, keys = {}, {}
local K_PENDING, K_DEAD, K_STATS, K_WAKE = KEYS[1], KEYS[4], KEYS[6], KEYS[7]
local prefix = ARGV[1]
local e
if form == 'ids' then
  local c = #ARGV - 2
  if c < 1 or c > 1000 then
    return bad('ids', 'expected 1..1000 ids after ARGV[2], got ' .. math.max(c, 0))
  end
  if #KEYS ~= 7 + c then
    return bad('keys', c .. ' ids need ' .. (7 + c) .. ' keys (7 queue keys + one job key per id), got ' .. #KEYS)
  end
elseif form == 'oldest' then
  local n = int(ARGV[3], 1, 1000)
  if not n then return bad('n', 'expected an integer 1..1000, got ' .. shown(ARGV[3])) end
  if #ARGV ~= 3 then
    return bad('arguments', 'the oldest form takes exactly 3 (prefix, "oldest", n), got ' .. #ARGV)
  end
  if #KEYS ~= 7 then
    return bad('keys', 'the oldest form takes the 7 queue keys, got ' .. #KEYS)
  end
else
  return bad('mode', 'expected "ids" or "oldest", got ' .. shown(form))
end

-- Redis 7 and Valkey always replicate effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end

-- read phase -----------------------------------------------------------------
local inDead = {}
if form == 'ids' then
  for i = 3, #ARGV do
    ids[#ids + 1] = ARGV[i]
    keys[#keys + 1] = KEYS[5 + i]
  end
  local s = redis.pcall('ZMSCORE', K_DEAD, unpack(ids))
  e = failure(s, K_DEAD, 'zset')
  if e then return e end
  for i = 1, #ids do inDead[i] = (s[i] ~= false and s[i] ~= nil) end
else
  local r = redis.pcall('ZRANGE', K_DEAD, 0, tonumber(ARGV[3]) - 1)
  e = failure(r, K_DEAD, 'zset')
  if e then return e end
  for i = 1, #r do
    ids[i] = r[i]
    keys[i] = prefix .. r[i]
    inDead[i] = true
  end
end

local moveIds, moveKeys, dropIds = {}, {}, {}
local seen = {}
local orphans = 0
for i = 1, #ids do
  local key = keys[i]
  local st = redis.pcall('HGET', key, 'status')
  e = failure(st, key, 'hash')
  if e then return e end
  if not seen[key] then
    seen[key] = true
    if st == 'dead' then
      moveIds[#moveIds + 1] = ids[i]
      moveKeys[#moveKeys + 1] = key
      dropIds[#dropIds + 1] = ids[i]
    elseif inDead[i] then
      orphans = orphans + 1
      dropIds[#dropIds + 1] = ids[i]
    end
  end
end
local nm = #moveIds

-- type checks for keys written without having been read
if nm > 0 then
  e = expect(K_PENDING, 'list') or expect(K_WAKE, 'list')
  if e then return e end
end
if nm > 0 or orphans > 0 then
  e = expect(K_STATS, 'hash')
  if e then return e end
end

-- write phase ----------------------------------------------------------------
if #dropIds > 0 then redis.call('ZREM', K_DEAD, unpack(dropIds)) end
-- counters use pcall: stats was type-checked before the first write, and a counter
-- holding a non-number must not fail a call whose changes are already made
if nm > 0 then
  redis.call('LPUSH', K_PENDING, unpack(moveIds))
  for i = 1, nm do
    redis.call('HSET', moveKeys[i], 'status', 'pending', 'attempts', 0)
  end
  local marks = {}
  for i = 1, nm do marks[i] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(marks))
  redis.call('LTRIM', K_WAKE, 0, 1023)
  redis.pcall('HINCRBY', K_STATS, 'redriven', nm)
end
if orphans > 0 then redis.pcall('HINCRBY', K_STATS, 'orphans', orphans) end
return nm
