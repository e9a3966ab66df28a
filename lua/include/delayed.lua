-- Delayed jobs' wake markers: the scripts that delay a job (enqueue, fail, settle_claim's
-- fails) read the earliest run-at before it and push a marker when the job runs sooner.
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
