-- The `ids` and `oldest` forms of redrive and purge: checks ARGV and KEYS, then selects
-- the dead jobs to act on, writing nothing. Leaves deadIds and deadKeys (each job whose
-- status is `dead`, once), deadPrio (their `priority` fields as read), deadUnique (their unique keys, by index), nd = #deadIds, dropIds (the entries to remove from dead:
-- those jobs and the orphans) and orphans (dead entries whose hash is gone or not `dead`).

-- arguments ------------------------------------------------------------------
local form = ARGV[2]
local ids, keys = {}, {}
local K_PENDING, K_DEAD, K_STATS, K_WAKE = KEYS[1], KEYS[4], KEYS[6], KEYS[7]
local prefix = ARGV[1]
local e
if form == 'ids' then
  local c = #ARGV - 2
  if c < 1 or c > 1000 then
    return rare().bad('ids', 'expected 1..1000 ids after ARGV[2], got ' .. math.max(c, 0))
  end
  if #KEYS ~= 7 + c then
    return rare().bad('keys', c .. ' ids need ' .. (7 + c) .. ' keys (7 queue keys + one job key per id), got ' .. #KEYS)
  end
elseif form == 'oldest' then
  local n = int(ARGV[3], 1, 1000)
  if not n then return rare().bad('n', 'expected an integer 1..1000, got ' .. rare().shown(ARGV[3])) end
  if #ARGV ~= 3 then
    return rare().bad('arguments', 'the oldest form takes exactly 3 (prefix, "oldest", n), got ' .. #ARGV)
  end
  if #KEYS ~= 7 then
    return rare().bad('keys', 'the oldest form takes the 7 queue keys, got ' .. #KEYS)
  end
else
  return rare().bad('mode', 'expected "ids" or "oldest", got ' .. rare().shown(form))
end


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

local deadIds, deadKeys, dropIds = {}, {}, {}
local deadPrio = {} -- each dead job's `priority` field as read (false when absent)
local deadUnique = {}      -- by index in deadIds: the job's unique key, when it has one
local seen = {}
local orphans = 0
for i = 1, #ids do
  local key = keys[i]
  local h = redis.pcall('HMGET', key, 'status', 'priority', 'unique_key')
  e = failure(h, key, 'hash')
  if e then return e end
  local st = h[1]
  if not seen[key] then
    seen[key] = true
    if st == 'dead' then
      deadIds[#deadIds + 1] = ids[i]
      deadKeys[#deadKeys + 1] = key
      deadPrio[#deadKeys] = h[2]
      deadUnique[#deadIds] = h[3]
      dropIds[#dropIds + 1] = ids[i]
    elseif inDead[i] then
      orphans = orphans + 1
      dropIds[#dropIds + 1] = ids[i]
    end
  end
end
local nd = #deadIds
