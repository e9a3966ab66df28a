-- leaseStart(token): the claimed_at (ms) a claim_token begins with, as claim writes it
-- (<claimed_at>:<#worker>:<worker>:<token>); nil for a token without one (the older
-- layout, whose claimed_at is a field of its own)
local function leaseStart(token)
  local at = string.find(token, ':', 1, true)
  if not at then return nil end
  return tonumber(string.sub(token, 1, at - 1))
end
-- log2floor(ms): floor(log2(max(ms, 1))) in exact arithmetic, the histogram bucket of a
-- processing time: halving a double is exact, so no rounding can move a power of two into
-- the wrong bucket
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
