-- Per-job options (docs/protocol.md, Per-job options): fields of a job's hash that
-- override the queue's meta settings of the same name for that job alone, and its
-- timeout_ms (the longest one run of it may take, enforced by its worker). Only enqueue
-- writes them; fail, settle_claim and reap read the retry policy where they read meta's;
-- claim, settle_claim and extend read visibility_timeout_ms as the length of its leases.
local JOB_OPTIONS = { max_attempts = true, backoff_initial_ms = true, backoff_max_ms = true,
  backoff_multiplier = true, visibility_timeout_ms = true, timeout_ms = true, rate_key = true,
  priority = true }
-- outcomes: `notify` (ms, 1..10^15): the job's end is appended to P:{T}:done and its hash
-- kept at least that long after it ends (docs/protocol.md, Outcomes)
JOB_OPTIONS.notify = true
-- jobOptions(at): the options block of enqueue's ARGV from ARGV[at] on: absent (nil, 0)
-- unless ARGV[at] is 'options'; then name, value pairs to the end of ARGV, each name at most
-- once. Returns the pairs as a flat list for HSET and how many ARGV the block takes, or
-- nil, nil and the error reply
local function jobOptions(at)
  if #ARGV < at or ARGV[at] ~= 'options' then return nil, 0 end
  local pairsN = #ARGV - at
  if pairsN == 0 or pairsN % 2 ~= 0 then
    return nil, nil, rare().bad('options', 'expected name, value pairs after "options", got ' ..
      pairsN .. ' arguments')
  end
  local out, seen = {}, {}
  for i = at + 1, #ARGV, 2 do
    local name, v = ARGV[i], ARGV[i + 1]
    if not JOB_OPTIONS[name] or seen[name] then
      return nil, nil, rare().bad('options', rare().shown(name) .. (seen[name] and ' is given twice' or
        ' is not an option (max_attempts, backoff_initial_ms, backoff_max_ms, backoff_multiplier, ' ..
        'visibility_timeout_ms, timeout_ms, rate_key, notify, priority)'))
    end
    seen[name] = v
    local ok
    if name == 'max_attempts' then
      ok = int(v, 1, 1000000)
    elseif name == 'priority' then
      -- one digit: the job's hash holds it as the scripts read it (priorityOf)
      ok = type(v) == 'string' and #v == 1 and int(v, 0, 9)
    elseif name == 'visibility_timeout_ms' or name == 'timeout_ms' or name == 'notify' then
      ok = int(v, 1, MAXMS)
    elseif name == 'rate_key' then
      -- the key claim's per-key rate limit counts the job under (Rate limits)
      ok = type(v) == 'string' and #v >= 1 and #v <= 256
    elseif name == 'backoff_multiplier' then
      ok = type(v) == 'string' and #v <= 24 and string.find(v, '^%d+%.?%d*$') and
        tonumber(v) >= 1 and tonumber(v) <= 1000
    else
      ok = int(v, 0, MAXMS)
    end
    if not ok then
      local want = 'an integer 0..10^15 ms'
      if name == 'max_attempts' then
        want = 'an integer 1..1000000'
      elseif name == 'backoff_multiplier' then
        want = 'a decimal number 1..1000'
      elseif name == 'priority' then
        want = 'an integer 0..9'
      elseif name == 'rate_key' then
        want = 'a key of 1..256 bytes'
      elseif name == 'visibility_timeout_ms' or name == 'timeout_ms' or name == 'notify' then
        want = 'an integer 1..10^15 ms'
      end
      return nil, nil, rare().bad(name, 'expected ' .. want .. ', got ' .. rare().shown(v))
    end
    out[#out + 1] = name
    out[#out + 1] = v
  end
  if seen.backoff_initial_ms and seen.backoff_max_ms and
    tonumber(seen.backoff_max_ms) < tonumber(seen.backoff_initial_ms) then
    return nil, nil, rare().bad('backoff_max_ms', 'expected at least backoff_initial_ms (' ..
      seen.backoff_initial_ms .. '), got ' .. rare().shown(seen.backoff_max_ms))
  end
  return out, 1 + pairsN
end
-- A job whose end acts on a field of its own, unique_key (written with the enqueue's
-- unique block), notify, timeout_ms or visibility_timeout_ms, also holds `end_opts` = 1:
-- ack and settle_claim read those fields only for a job that holds it, so a job without
-- them costs its ack no more than the two fields its lease is checked by.
-- withEndOpts(opts): the options block's pairs, with end_opts 1 when one of them is such
-- an option (opts itself otherwise)
local function withEndOpts(opts)
  for i = 1, #opts, 2 do
    local name = opts[i]
    if name == 'notify' or name == 'timeout_ms' or name == 'visibility_timeout_ms' then
      local out = { 'end_opts', '1' }
      for j = 1, #opts do out[j + 2] = opts[j] end
      return out
    end
  end
  return opts
end
-- optionPriority(opts): the priority an options block gives (0 when none)
local function optionPriority(opts)
  if opts then
    for i = 1, #opts, 2 do
      if opts[i] == 'priority' then return tonumber(opts[i + 1]) end
    end
  end
  return 0
end
-- jobMaxAttempts(v, def): a job's own max_attempts (v, as read from its hash) when it is one
-- (an integer 1..1000000), else def, the queue's
local function jobMaxAttempts(v, def)
  if v then
    local x = int(v, 1, 1000000)
    if x then return x end
  end
  return def
end
