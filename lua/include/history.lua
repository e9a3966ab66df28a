-- History (docs/protocol.md, History): per-minute counts of the jobs enqueued (e), acked
-- (a), failed (f) and dead-lettered (d) in P:{T}:hist:<kind>:<hour> (a hash per kind and
-- hour since the epoch; fields: the minute of the hour, 0..59), and the acks' processing
-- time histogram per 10 minutes in P:{T}:hist:h:<hour> (fields <slot 0..5>:<bucket>).
-- Each key expires 25 hours after its hour began (PEXPIREAT, set by the count that
-- creates a field), so a queue keeps at most 26 hours of each: 5 x 26 small hashes.
-- The hour, minute and 10-minute slot of now as decimal strings, made once a call (its
-- tallies share one now): a number made a string costs more than the rest of a tally
local histAt, histHour, histHourS, histMinS, histSlotS = nil, 0, nil, nil, nil
local function histOf(now)
  if now ~= histAt then
    histAt, histHour = now, math.floor(now / 3600000)
    histHourS = S(histHour)
    histMinS = S(math.floor(now / 60000) % 60)
    histSlotS = string.char(48 + math.floor(now / 600000) % 6)
  end
end
-- tally(kind, field, n, now): count n in field of kind's key of now's hour
local function tally(kind, field, n, now)
  histOf(now)
  local key = string.sub(ARGV[1], 1, -5) .. 'hist:' .. kind .. ':' .. histHourS
  -- a wrong-typed key is left as it is: history never fails a call
  if redis.pcall('HINCRBY', key, field, n == 1 and '1' or S(n)) == n then
    redis.pcall('PEXPIREAT', key, S((histHour + 25) * 3600000))
  end
end
-- tallyCount(kind, n, now): n jobs of kind (e, a, f, d) in now's minute
local function tallyCount(kind, n, now)
  if n > 0 then
    histOf(now)
    tally(kind, histMinS, n, now)
  end
end
-- tallyTime(bS, n, now): n acks whose processing time fell in bucket bS (as a decimal
-- string), in now's 10 minutes
local function tallyTime(bS, n, now)
  histOf(now)
  tally('h', histSlotS .. ':' .. bS, n, now)
end
-- tallyBuckets(bFirst, cFirst, buckets, blist, now): the processing times of a call's
-- acks, in the stats hash (KEYS[6], h:<b>) and in the history: the first bucket and its
-- count, then the others (buckets: b -> count, blist: their order; nil when there are none)
local function tallyBuckets(bFirst, cFirst, buckets, blist, now)
  if bFirst then
    local bS = S(bFirst)
    redis.pcall('HINCRBY', KEYS[6], 'h:' .. bS, cFirst == 1 and '1' or S(cFirst))
    tallyTime(bS, cFirst, now)
  end
  for i = 1, blist and #blist or 0 do
    local b = blist[i]
    local c = buckets[b]
    local bS = S(b)
    redis.pcall('HINCRBY', KEYS[6], 'h:' .. bS, c == 1 and '1' or S(c))
    tallyTime(bS, c, now)
  end
end
