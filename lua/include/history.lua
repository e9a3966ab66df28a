-- History (docs/protocol.md, History): per-minute counts of the jobs enqueued (e), acked
-- (a), failed (f) and dead-lettered (d) in P:{T}:hist:<kind>:<hour> (a hash per kind and
-- hour since the epoch; fields: the minute of the hour, 0..59), and the acks' processing
-- time histogram per 10 minutes in P:{T}:hist:h:<hour> (fields <slot 0..5>:<bucket>).
-- Each key expires 25 hours after its hour began (PEXPIREAT, set by the count that
-- creates a field), so a queue keeps at most 26 hours of each: 5 x 26 small hashes.
-- tally(kind, field, n, now): count n in field of kind's key of now's hour
local function tally(kind, field, n, now)
  local hour = math.floor(now / 3600000)
  local key = string.sub(ARGV[1], 1, -5) .. 'hist:' .. kind .. ':' .. S(hour)
  -- a wrong-typed key is left as it is: history never fails a call
  if redis.pcall('HINCRBY', key, field, S(n)) == n then
    redis.pcall('PEXPIREAT', key, S((hour + 25) * 3600000))
  end
end
-- tallyCount(kind, n, now): n jobs of kind (e, a, f, d) in now's minute
local function tallyCount(kind, n, now)
  if n > 0 then tally(kind, S(math.floor(now / 60000) % 60), n, now) end
end
-- tallyTime(b, n, now): n acks whose processing time fell in bucket b, in now's 10 minutes
local function tallyTime(b, n, now)
  tally('h', S(math.floor(now / 600000) % 6) .. ':' .. S(b), n, now)
end
