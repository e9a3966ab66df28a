-- storedMs(v): a time in ms read from stored data (a job hash may hold anything): v when
-- it is 1 to 16 decimal digits, else nil. Never tonumber() alone: it reads "-inf", "1e400"
-- and "0x..." too, and an infinite time makes the histogram bucket loop for ever.
local function storedMs(v)
  if type(v) ~= 'string' or #v < 1 or #v > 16 or string.find(v, '%D') then return nil end
  return tonumber(v)
end
-- leaseStart(token): the claimed_at (ms) a claim_token begins with, as claim writes it
-- (<claimed_at>:<#worker>:<worker>:<token>); nil for a token without one (the older
-- layout, whose claimed_at is a field of its own) or whose start is no such time.
-- The leases of one claim call share their claimed_at, and a caller ends them together:
-- the last start read is kept, so a run of them is read once
local lastStart, lastStartMs = nil, false
local function leaseStart(token)
  local at = string.find(token, ':', 1, true)
  if not at or at > 17 then return nil end
  local s = string.sub(token, 1, at - 1)
  if s ~= lastStart then
    lastStart, lastStartMs = s, storedMs(s) or false
  end
  return lastStartMs or nil
end
-- claimedAt(token, key, now): when the lease of token on the job at key began, for the
-- histogram: the token's claimed_at, else the hash's claimed_at field (the older layout),
-- else now (a start that cannot be read counts as a processing time of 0)
local function claimedAt(token, key, now)
  local at = leaseStart(token)
  if at then return at end
  return storedMs(redis.call('HGET', key, 'claimed_at')) or now
end
-- log2floor(ms): floor(log2(max(ms, 1))) in exact arithmetic, the histogram bucket of a
-- processing time: halving a double is exact, so no rounding can move a power of two into
-- the wrong bucket. Bounded: ms above 10^15 counts as 10^15 (NaN as 0)
local function log2floor(ms)
  local b = 0
  if not (ms >= 2) then return 0 end
  if ms > MAXMS then ms = MAXMS end
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
-- policyBackoff(attempts, initial, cap, mult): the retry delay of the meta policy for a job
-- claimed attempts times, from the raw meta fields backoff_initial_ms, backoff_max_ms and
-- backoff_multiplier: floor(initial * mult^(attempts - 1)) capped at cap
local function policyBackoff(attempts, initial, cap, mult)
  initial = num(initial, 1000)
  if initial < 0 then initial = 1000 end
  cap = num(cap, 300000)
  if cap < 0 then cap = 300000 end
  mult = num(mult, 2)
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
  return b
end
