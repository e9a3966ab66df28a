--[[
  settle_claim: end the leases a worker just finished (ack or fail each) and claim its
  next jobs, in one call: a busy worker pays one round trip and one script call per job
  (per batch) instead of two.

  KEYS[1] P:{T}:pending      LIST  claim pops here; failed retries go to the back (LPUSH),
                                   released jobs to the front (RPUSH)
  KEYS[2] P:{T}:processing   ZSET  id -> lease_until: leases made and ended
  KEYS[3] P:{T}:delayed      ZSET  id -> run_at: due jobs promoted, retries with a backoff
  KEYS[4] P:{T}:dead         ZSET  id -> died_at: failures dead-lettered
  KEYS[5] P:{T}:meta         HASH  visibility_timeout_ms (when ARGV[4] is 0),
                                   completed_retention_ms, max_attempts, backoff_* (the
                                   last two overridden by the job hash's fields of the
                                   same names, its per-job options)
  KEYS[6] P:{T}:stats        HASH  the counters of claim, ack and fail
  KEYS[7] P:{T}:wake         LIST  trimmed as by claim; markers as by fail
  KEYS[8] P:{T}:orphans      ZSET  id -> ms it was set aside
  KEYS[9] P:{T}:claimreq:<request>  STRING  the answer of this request, for its retries:
                                     a MessagePack array of the worker, the SHA-1 (hex)
                                     of the MessagePack array of ARGV, more, a, f, the
                                     leases' claim_token ('' when none), the a ack
                                     results, the f fail outcomes, then the id of each
                                     lease; lives the visibility, at most 60 s

  ARGV[1]        job-key prefix P:{T}:job:  (job keys are built as ARGV[1]..id)
  ARGV[2]        n, the most jobs to claim, 1..1000
  ARGV[3]        worker id, stored in the leases' claim_token
  ARGV[4]        visibility in ms, 0..10^15 (0 = meta visibility_timeout_ms, default 30000)
  ARGV[5]        request id, 1..256 bytes: the same for every retry of one call, and
                 the caller's token of every lease this call makes (a fresh id per call,
                 e.g. 128 random bits in hex, so two leases of one job never share a
                 claim_token)
  ARGV[6]        a, the number of acks, 0..1000
  ARGV[7]        f, the number of fails, 0..1000 (a + f at most 1000)
  then           a pairs: id, token (as ack)
  then           f quintuples: id, token, error, mode, backoff (as fail: mode `retry`,
                 `dead` or `release`; backoff -1..10^15, -1 = meta policy)

  Returns: one flat array: more (1 or 0, as claim); the token of every lease this call
           made (the claim_token written, '' when it made none); then a integers, the
           ack results in ack order (1 acked or 0 stale, as ack); then f strings, the
           fail outcomes in fail order (the new status `pending`, `delayed` or `dead`,
           or `stale`, as fail); then 4 entries per leased job: id, payload, attempts
           (integer), lease_until (integer ms).

  Each leased job's hash gets what claim writes: status `processing`, attempts + 1,
  lease_until and claim_token = <claimed_at>:<#worker>:<worker>:<ARGV[5]>, one token
  for every lease of the call.

  Each ack and fail means exactly what the ack and fail scripts do with it (fencing by
  token and status, counters, histogram, retention, backoff policy, wake markers), and a
  stale one changes nothing but its counter: it never keeps the claim from happening. A
  job named twice is settled once; later mentions are stale. The claim part is claim's
  (KEYS[1..8]): it runs after the settle part was read and before it is written, so jobs
  failed or released by this call go back to pending after the claim and are not claimed
  by it. With a = f = 0 the call is a claim.

  Retry-safe: a call that leased a job or settled anything records its answer in KEYS[9]
  (expiring at now + the visibility used, at most 60 s: SET ... PXAT). A call whose
  KEYS[9] holds a record changes nothing. When the record's worker is ARGV[3] and its
  digest that of this call's ARGV (a retry sends the same arguments, byte for byte), it
  answers the recorded ack results and fail outcomes (the settle part is not run again,
  so a failure is never applied twice), the recorded leases this request still holds (as
  claim's retry), and the recorded more; it counts `replayed`. Otherwise it fails with
  `invalid request`; so does a request id whose key holds a claim record (a list). A
  record whose first entry is a number (written by an earlier release) is answered
  without that check. A record of another shape (not a MessagePack array, more not 0 or
  1, a or f not whole in 0..1000 or a + f over 1000, a token that is no string, more
  than 1000 leases) fails the call with `invalid request`, changing nothing: stored data
  is read in bounded steps.
  A lease's claim_token names the request that made it (<request> above); the call
  deletes the records of the requests that made the leases it acks or fails: their
  reply arrived (the caller holds the token), so they are not sent again.
  A failed call leaves every key as it was, as claim.

  Paused queue: while meta (KEYS[5]) holds the field `paused` (see manage.lua), its claim
  part leases and promotes nothing (one HEXISTS of meta per call), empties wake and answers
  no job with more 0; its acks and fails are applied as ever.
  Unique keys: an acked or dead-lettered job that holds its unique key until done (hash
  field unique_key, unique_mode not until-started or debounce) releases it, and the claim
  part releases the keys of the jobs it leases that hold theirs until started, as claim:
  P:{T}:unique:<unique_key> is deleted when it still names the id (GET, then DEL).
  Workers: every call (paused or not, whether it leased anything) scores the worker now
  in P:{T}:workers (ZSET, the key built from ARGV[1] with `job:` replaced by `workers`;
  reap forgets workers unseen for an hour; a wrong-typed key is left as it is).

  History: counts its acks (a), failures (f) and jobs dead-lettered (d) in P:{T}:hist:<kind>:<hour> (a hash per kind and hour since the
  epoch, the field the minute of the hour; the key built from ARGV[1] with `job:` replaced
  by `hist:`), expiring 25 h after its hour began (PEXPIREAT when a field is created),
  and each ack's bucket in P:{T}:hist:h:<hour> as ack does;
  a wrong-typed key is left as it is.

  Attempt errors: each fail in mode retry or dead keeps the attempt's error in the job hash: `errors` + 1 and
  error:<errors mod 5 + 1> = <attempt>:<now ms>:<text, its first 1024 bytes> (the last 5
  failed attempts' errors), in the same HSET.
]]

-- BEGIN include/prelude.lua (generated by make lua; edit lua/include/prelude.lua)
-- The helpers every script shares. Error replies are part of the protocol
-- (docs/protocol.md, Errors): change their text only with the protocol.
local MAXMS = 1000000000000000 -- 10^15: the largest ms any argument or setting takes

-- bad(name, detail): the reply for an invalid argument
local function bad(name, detail)
  return redis.error_reply('ERR jobqueue: invalid ' .. name .. ': ' .. detail)
end
-- shown(v): an argument as an error quotes it: "v" (40 bytes at most, control bytes as ?)
-- or missing
local function shown(v)
  if v == nil or v == false then return 'missing' end
  if #v > 40 then v = string.sub(v, 1, 40) .. '...' end
  return '"' .. (string.gsub(v, '%c', '?')) .. '"'
end
-- int(v, lo, hi): the decimal integer v when it is one in lo..hi, else nil (-0 reads as 0).
-- "0" and "1", the common counts and flags, are read without a pattern or tonumber()
local function int(v, lo, hi)
  local x
  if v == '0' then
    x = 0
  elseif v == '1' then
    x = 1
  else
    if type(v) ~= 'string' or not string.find(v, '^%-?%d+$') then return nil end
    x = tonumber(v)
    if x == nil then return nil end
    if x == 0 then x = 0 end
  end
  if x < lo or x > hi then return nil end
  return x
end
-- S(x): an integer as a decimal string. Numbers go to redis.call() as such strings:
-- Redis 7.0 formats a Lua number argument with printf("%.17g"), several times slower.
local function S(x) return string.format('%d', x) end
-- num(v, def): a setting read from a hash as a finite number, def when it is not one
local function num(v, def)
  v = tonumber(v)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return def end
  return v
end

-- perJob(n, at, width, unit, fields): for a script given n jobs, each as a unit of width
-- ARGV (named by fields) after ARGV[at] and a job key after the 7 queue keys: the error
-- when ARGV or KEYS does not hold exactly that many, else nil
local function perJob(n, at, width, unit, fields)
  if #ARGV ~= at + width * n then
    return bad('n', 'n=' .. n .. ' needs exactly ' .. n .. ' ' .. unit .. 's (' .. fields ..
      ') after ARGV[' .. at .. '], got ' .. math.max(#ARGV - at, 0) .. ' arguments')
  end
  if #KEYS ~= 7 + n then
    return bad('keys', 'n=' .. n .. ' needs ' .. (7 + n) ..
      ' keys (7 queue keys + one job key per ' .. unit .. '), got ' .. #KEYS)
  end
  return nil
end

-- wrongtype(key, want[, t]): the reply for a key that holds type t (read when not given)
-- where want was expected
local function wrongtype(key, want, t)
  if not t then
    t = redis.call('TYPE', key)
    if type(t) == 'table' then t = t.ok end
  end
  return redis.error_reply('ERR jobqueue: key ' .. key .. ' holds the wrong type (' ..
    tostring(t) .. '), expected ' .. want)
end
-- expect(key, want): nil when key is absent or of type want, else the wrongtype reply;
-- for keys a call writes without having read them
local function expect(key, want)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  if t == want or t == 'none' then return nil end
  return wrongtype(key, want, t)
end
-- failure(r, key, want): the error of a failed redis.pcall() reply r, naming key when it
-- holds the wrong type; nil when r is not an error
local function failure(r, key, want)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return wrongtype(key, want) end
    return redis.error_reply(r.err)
  end
  return nil
end

-- effects(): before the first write. Redis 7 and Valkey always replicate effects; 6.2
-- (no REDIS_VERSION_NUM) is told to
local function effects()
  if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
end
-- clock(): the Redis clock in ms, seconds * 1000 + floor(microseconds / 1000), and the
-- same as a decimal string (made from TIME's digits: one tonumber(), no string.format)
local function clock()
  local t = redis.call('TIME')
  local us = t[2]
  local l = #us
  local s
  if l == 6 then
    s = t[1] .. string.sub(us, 1, 3)
  elseif l > 3 then
    s = t[1] .. (l == 5 and '0' or '00') .. string.sub(us, 1, l - 3)
  else
    s = t[1] .. '000'
  end
  return tonumber(s), s
end
-- keepAside(key, ids, nowS): ids whose job hash is absent go to the orphans zset, scored
-- the time they were set aside: an id set aside earlier keeps its first time; one purge
-- forgot (a negative score) is set aside anew
local function keepAside(key, ids, nowS)
  if #ids == 0 then return end
  local s = redis.call('ZMSCORE', key, unpack(ids))
  local z = {}
  for i = 1, #ids do
    if not s[i] or tonumber(s[i]) < 0 then
      z[#z + 1] = nowS
      z[#z + 1] = ids[i]
    end
  end
  if #z > 0 then redis.call('ZADD', key, unpack(z)) end
end
-- wrongTyped(r): true when r, a redis.pcall() reply, is a WRONGTYPE error: a job key that
-- is not a hash, which claim and reap set aside like an absent hash
local function wrongTyped(r)
  return type(r) == 'table' and r.err ~= nil and string.find(r.err, 'WRONGTYPE', 1, true) ~= nil
end
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
-- END include/prelude.lua

-- BEGIN include/unique.lua (generated by make lua; edit lua/include/unique.lua)
-- Unique keys (docs/protocol.md, Unique keys): a job enqueued with one records it in its
-- hash (`unique_key`, `unique_mode`); the lock P:{T}:unique:<key> names the job's id.
-- atClaim(mode): true when the lock is released at the job's claim (until-started,
-- debounce), false when at its end (until-done, and any other stored value)
local function atClaim(mode)
  return mode == 'until-started' or mode == 'debounce'
end
-- unlock(k, id): the lock of unique key k deleted when it still names job id
-- (compare-and-delete): a lock taken since by another job, or whose window ran out, is
-- left alone, and so is a wrong-typed key. The key is built from ARGV[1], the job-key prefix
local function unlock(k, id)
  local lk = string.sub(ARGV[1], 1, -5) .. 'unique:' .. k
  if redis.pcall('GET', lk) == id then redis.call('DEL', lk) end
end
-- END include/unique.lua

-- BEGIN include/history.lua (generated by make lua; edit lua/include/history.lua)
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
  tally('h', S(math.floor(now / 600000) % 6) .. ':' .. b, n, now)
end
-- END include/history.lua

-- BEGIN include/retry_policy.lua (generated by make lua; edit lua/include/retry_policy.lua)
-- storedMs(v): a time in ms read from stored data (a job hash may hold anything): v when
-- it is 1 to 16 decimal digits, else nil. Never tonumber() alone: it reads "-inf", "1e400"
-- and "0x..." too, and an infinite time makes the histogram bucket loop for ever.
local function storedMs(v)
  if type(v) ~= 'string' or #v < 1 or #v > 16 or string.find(v, '%D') then return nil end
  return tonumber(v)
end
-- leaseStart(token): the claimed_at (ms) a claim_token begins with, as claim writes it
-- (<claimed_at>:<#worker>:<worker>:<token>); nil for a token without one (the older
-- layout, whose claimed_at is a field of its own) or whose start is no such time
local function leaseStart(token)
  local at = string.find(token, ':', 1, true)
  if not at or at > 17 then return nil end
  return storedMs(string.sub(token, 1, at - 1))
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
-- END include/retry_policy.lua

-- BEGIN include/attempt_errors.lua (generated by make lua; edit lua/include/attempt_errors.lua)
-- Per-attempt errors (docs/protocol.md, Job hash): a job keeps the errors of its last
-- ERRORS_KEPT failed attempts in the fields error:1 .. error:5, written in turn (the field
-- `errors` counts those written so far), each `<attempt>:<at ms>:<text>`, the text cut to
-- its first ERROR_BYTES bytes. No command of its own: the fields ride on the HSET that
-- ends the attempt.
local ERRORS_KEPT, ERROR_BYTES = 5, 1024
-- attemptError(count, attempt, nowS, text): the four HSET arguments that keep text as the
-- error of attempt; count is the job's `errors` field as read (stored data: anything but
-- an integer 0..10^15 counts as 0)
local function attemptError(count, attempt, nowS, text)
  local c = int(count, 0, MAXMS) or 0
  if #text > ERROR_BYTES then text = string.sub(text, 1, ERROR_BYTES) end
  return 'errors', S(c + 1), 'error:' .. S(c % ERRORS_KEPT + 1),
    S(math.floor(attempt)) .. ':' .. nowS .. ':' .. text
end
-- END include/attempt_errors.lua

-- BEGIN include/job_options.lua (generated by make lua; edit lua/include/job_options.lua)
-- Per-job options (docs/protocol.md, Per-job options): fields of a job's hash that
-- override the queue's meta settings of the same name for that job alone. Only enqueue
-- writes them; fail, settle_claim and reap read them where they read meta's.
local JOB_OPTIONS = { max_attempts = true, backoff_initial_ms = true, backoff_max_ms = true,
  backoff_multiplier = true }
-- jobOptions(at): the options block of enqueue's ARGV from ARGV[at] on: absent (nil, 0)
-- unless ARGV[at] is 'options'; then name, value pairs to the end of ARGV, each name at most
-- once. Returns the pairs as a flat list for HSET and how many ARGV the block takes, or
-- nil, nil and the error reply
local function jobOptions(at)
  if #ARGV < at or ARGV[at] ~= 'options' then return nil, 0 end
  local pairsN = #ARGV - at
  if pairsN == 0 or pairsN % 2 ~= 0 then
    return nil, nil, bad('options', 'expected name, value pairs after "options", got ' ..
      pairsN .. ' arguments')
  end
  local out, seen = {}, {}
  for i = at + 1, #ARGV, 2 do
    local name, v = ARGV[i], ARGV[i + 1]
    if not JOB_OPTIONS[name] or seen[name] then
      return nil, nil, bad('options', shown(name) .. (seen[name] and ' is given twice' or
        ' is not an option (max_attempts, backoff_initial_ms, backoff_max_ms, backoff_multiplier)'))
    end
    seen[name] = v
    local ok
    if name == 'max_attempts' then
      ok = int(v, 1, 1000000)
    elseif name == 'backoff_multiplier' then
      ok = type(v) == 'string' and #v <= 24 and string.find(v, '^%d+%.?%d*$') and
        tonumber(v) >= 1 and tonumber(v) <= 1000
    else
      ok = int(v, 0, MAXMS)
    end
    if not ok then
      local want = name == 'max_attempts' and 'an integer 1..1000000' or
        (name == 'backoff_multiplier' and 'a decimal number 1..1000' or 'an integer 0..10^15 ms')
      return nil, nil, bad(name, 'expected ' .. want .. ', got ' .. shown(v))
    end
    out[#out + 1] = name
    out[#out + 1] = v
  end
  if seen.backoff_initial_ms and seen.backoff_max_ms and
    tonumber(seen.backoff_max_ms) < tonumber(seen.backoff_initial_ms) then
    return nil, nil, bad('backoff_max_ms', 'expected at least backoff_initial_ms (' ..
      seen.backoff_initial_ms .. '), got ' .. shown(seen.backoff_max_ms))
  end
  return out, 1 + pairsN
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
-- END include/job_options.lua

-- BEGIN include/claim_jobs.lua (generated by make lua; edit lua/include/claim_jobs.lua)
-- claimJobs(n, nS, vis, worker, tokenAt, now, check, gone, undue, flat, nowS): steps 1 to 3 of
-- claim (docs/protocol.md) on KEYS[1..8]: promote due delayed jobs, lease up to n ready
-- jobs to worker (the c-th gets the caller's token ARGV[tokenAt + c]; with flat, every
-- lease gets the caller's token tokenAt itself), set aside or drop orphans, empty wake
-- when pending ran dry, release the unique key of each leased job that holds one until
-- it starts (docs/protocol.md, Unique keys); on a paused queue (meta's `paused` field) it leases and promotes
-- nothing and empties wake. Every call scores worker now in P:{T}:workers (built from
-- the job-key prefix, as the request records' keys). nS is n as Redis reads a count; vis 0 means meta's
-- visibility_timeout_ms (read only when a job is leased). check(nc, orphans), when given,
-- runs after the reads and before the first write but the RPOPs: an error it returns
-- fails the call with every key as it was; check = true stands for the check that
-- stats is a hash (or absent) when the claim writes no counter. gone, when given, are ids to remove from
-- processing (leases the caller ends), removed before the new leases are added so the
-- set stays small. undue, when given, is an empty table: the caller knows delayed is
-- absent and it is not read. flat, when given, is a table each leased job is appended to
-- as id, payload, attempts, lease_until. nowS, when given, is now as a decimal string.
-- Returns out, ids, nc, more, vis, token, leaseS (out: the jobs as claim replies them, or flat; ids: their ids in order, vis: the visibility used, token: with flat, the
-- claim_token of every lease made, else nil; leaseS: the leases' lease_until as a
-- decimal string, nil when none was made), or nil and the error reply.
-- unclaim(pops, first, firstBy, err): what claimJobs wrote before it failed, undone: the
-- counter first taken back by firstBy (when first is given), the ids of pops (the RPOP
-- replies, in order) pushed back where they were; returns nil, err
local function unclaim(pops, first, firstBy, err)
  if first then
    -- a counter at zero was absent before (counters only ever grow)
    if redis.call('HINCRBY', KEYS[6], first, S(-firstBy)) == 0 then
      redis.call('HDEL', KEYS[6], first)
    end
  end
  local back = {}
  for b = #pops, 1, -1 do
    local ids = pops[b]
    for i = #ids, 1, -1 do back[#back + 1] = ids[i] end
  end
  if #back > 0 then redis.call('RPUSH', KEYS[1], unpack(back)) end
  return nil, err
end
local function claimJobs(n, nS, vis, worker, tokenAt, now, check, gone, undue, flat, nowS)
  local K_PENDING, K_PROCESSING, K_DELAYED = KEYS[1], KEYS[2], KEYS[3]
  local K_META, K_STATS, K_WAKE, K_ORPHANS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
  local prefix = ARGV[1]
  nowS = nowS or S(now)
  -- a paused queue (meta holds a `paused` field) leases and promotes nothing; the caller's
  -- gone leases still leave processing, and wake is emptied (pendingDone below)
  local paused = redis.pcall('HEXISTS', K_META, 'paused')
  if type(paused) == 'table' then return nil, failure(paused, K_META, 'hash') end
  paused = paused == 1
  if paused then n, undue = 0, {} end
  local orphans = 0
  local aside = nil          -- ids whose hash is absent: set aside, never forgotten
  local wrong = 0            -- of them, the ids whose job key is not a hash

  -- due delayed jobs, earliest first, at most 100 (orphans included); none when the
  -- caller knows delayed is absent
  local due = undue
  if not due then
    due = redis.pcall('ZRANGEBYSCORE', K_DELAYED, '-inf', nowS, 'LIMIT', '0', '100')
    -- a reply that is always a table is checked for .err directly: cheaper than failure()
    if due.err then return nil, failure(due, K_DELAYED, 'zset') end
  end
  local promo, promoAtt, promoSet = due, nil, due -- empty unless something is due
  if #due > 0 then promo, promoAtt, promoSet = {}, {}, {} end
  local promoUni = nil       -- by index in promo: a unique key released at the claim
  for i = 1, #due do
    local id = due[i]
    local key = prefix .. id
    local h = redis.pcall('HMGET', key, 'status', 'attempts', 'unique_key', 'unique_mode')
    if h.err then
      if not wrongTyped(h) then return nil, failure(h, key, 'hash') end
      -- a job key that is not a hash: set aside, the queue keeps flowing
      orphans, wrong = orphans + 1, wrong + 1
      aside = aside or {}
      aside[#aside + 1] = id
    elseif h[1] == 'delayed' then
      promo[#promo + 1] = id
      promoAtt[#promo] = h[2]
      promoSet[id] = true
      if h[3] and atClaim(h[4]) then
        promoUni = promoUni or {}
        promoUni[#promo] = h[3]
      end
    else
      orphans = orphans + 1
      -- a hash without status that exists is a pending job: this entry is a stray one
      if not h[1] and redis.call('EXISTS', key) == 0 then
        aside = aside or {}
        aside[#aside + 1] = id
      end
    end
  end

  -- ids leave pending from its RPOP end: first the ids already there, then the
  -- promoted ones (they go behind them). The first RPOP is the first write of the call:
  -- it reveals a wrong-typed pending key before anything changed, and if a later check
  -- fails, unclaim() pushes the popped ids back where they were.
  local cIds, cKeys, cAtt, cPay = {}, {}, {}, {}
  local cUni = nil           -- by lease: the unique key released at this claim
  local taken = {}
  local pops = {}            -- the RPOP replies, in order
  local budget = n + 100
  local popped, promoUsed = 0, 0
  local pendingDone = paused

  while #cIds < n and popped < budget do
    if not pendingDone then
      local want = n - #cIds
      if budget - popped < want then want = budget - popped end
      local ids = redis.pcall('RPOP', K_PENDING, want == n and nS or S(want))
      if not ids then
        ids = {}
      elseif ids.err then
        return unclaim(pops, nil, 0, failure(ids, K_PENDING, 'list'))
      end
      pops[#pops + 1] = ids
      popped = popped + #ids
      if #ids < want then pendingDone = true end
      for j = 1, #ids do
        local id = ids[j]
        local key = prefix .. id
        -- the whole hash: a ready job's is its payload alone, cheaper to read than three
        -- named fields
        local h = redis.pcall('HGETALL', key)
        if h.err then
          if not wrongTyped(h) then return unclaim(pops, nil, 0, failure(h, key, 'hash')) end
          -- a job key that is not a hash: set aside (below), the queue keeps flowing
          wrong = wrong + 1
          h = {}
        end
        local st, att, pay, uk, um = nil, nil, nil, nil, nil
        for f = 1, #h, 2 do
          local name = h[f]
          if name == 'payload' then
            pay = h[f + 1]
          elseif name == 'status' then
            st = h[f + 1]
          elseif name == 'attempts' then
            att = h[f + 1]
          elseif name == 'unique_key' then
            uk = h[f + 1]
          elseif name == 'unique_mode' then
            um = h[f + 1]
          end
        end
        -- a job enqueued ready has no status: a hash that exists without status is pending
        if not st and #h > 0 then st = 'pending' end
        if promoSet[id] and st == 'delayed' then st = 'pending' end -- promoted before the pop
        if st == 'pending' and not taken[key] then
          taken[key] = true
          local c = #cIds + 1
          cIds[c], cKeys[c], cAtt[c], cPay[c] = id, key, att, pay or ''
          if uk and atClaim(um) then
            cUni = cUni or {}
            cUni[c] = uk
          end
        else
          orphans = orphans + 1
          if not st then
            aside = aside or {}
            aside[#aside + 1] = id
          end
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
        if promoUni and promoUni[promoUsed] then
          cUni = cUni or {}
          cUni[c] = promoUni[promoUsed]
        end
      end
    end
  end

  local nc = #cIds
  local more = 0
  if nc < n and ((popped >= budget and redis.call('LLEN', K_PENDING) > 0) or #due == 100) then
    more = 1
  end
  local e
  -- the orphans key is written without having been read: its type is checked first
  if aside then
    e = expect(K_ORPHANS, 'zset')
    if e then return unclaim(pops, nil, 0, e) end
  end
  if check == true then
    if nc == 0 and orphans == 0 then
      e = expect(K_STATS, 'hash')
      if e then return unclaim(pops, nil, 0, e) end
    end
  elseif check then
    e = check(nc, orphans)
    if e then return unclaim(pops, nil, 0, e) end
  end
  local lease, leaseS = 0, nil
  if nc > 0 then
    if vis == 0 then
      local m = redis.pcall('HMGET', K_META, 'visibility_timeout_ms')
      if m.err then return unclaim(pops, nil, 0, failure(m, K_META, 'hash')) end
      vis = tonumber(m[1])
      if vis == nil or vis ~= vis or vis < 1 then vis = 30000 end
      if vis > MAXMS then vis = MAXMS end
      if vis % 1 ~= 0 then vis = math.floor(vis) end
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
      if string.find(r.err, 'WRONGTYPE', 1, true) then return unclaim(pops, nil, 0, failure(r, K_STATS, 'hash')) end
      -- a counter holding a non-number must not fail the call; it stays as it is
      first = nil
    end
  end

  local out = flat
  if not flat then out = {} end
  if gone and #gone > 0 then
    local r
    if #gone == 1 then
      r = redis.pcall('ZREM', K_PROCESSING, gone[1])
    else
      r = redis.pcall('ZREM', K_PROCESSING, unpack(gone))
    end
    e = failure(r, K_PROCESSING, 'zset')
    if e then return unclaim(pops, first, firstBy, e) end
  end
  if nc > 0 then
    local r
    if nc == 1 then
      r = redis.pcall('ZADD', K_PROCESSING, leaseS, cIds[1])
    else
      local z = {}
      for c = 1, nc do
        z[2 * c - 1] = leaseS
        z[2 * c] = cIds[c]
      end
      r = redis.pcall('ZADD', K_PROCESSING, unpack(z))
    end
    e = failure(r, K_PROCESSING, 'zset')
    if e then return unclaim(pops, first, firstBy, e) end
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
  -- a lease's claim_token: claimed_at, the worker (its length first) and the caller's token,
  -- <claimed_at>:<#worker>:<worker>:<token>; made once when every lease shares one token
  local stamp, shared = nil, nil
  if nc > 0 then
    stamp = nowS .. ':' .. #worker .. ':' .. worker .. ':'
    if flat then shared = stamp .. tokenAt end
  end
  for c = 1, nc do
    local att, attS = 1, '1' -- absent before the first claim
    if cAtt[c] then
      att = (tonumber(cAtt[c]) or 0) + 1
      attS = S(att)
    end
    local token = shared
    if not token then token = stamp .. ARGV[tokenAt + c] end
    redis.call('HSET', cKeys[c], 'status', 'processing', 'claim_token', token,
      'attempts', attS, 'lease_until', leaseS)
    -- the job started: a unique key held until then is released
    if cUni and cUni[c] then unlock(cUni[c], cIds[c]) end
    if flat then
      local f = #flat
      flat[f + 1], flat[f + 2], flat[f + 3], flat[f + 4] = cIds[c], cPay[c], att, lease
    else
      out[c] = { cIds[c], cPay[c], att, token, lease }
    end
  end
  if aside then keepAside(K_ORPHANS, aside, nowS) end
  -- the other counters: stats is known to be a hash by now
  if nc > 0 and orphans > 0 then redis.pcall('HINCRBY', K_STATS, 'orphans', S(orphans)) end
  if aside then redis.pcall('HINCRBY', K_STATS, 'set_aside', S(#aside)) end
  if wrong > 0 then redis.pcall('HINCRBY', K_STATS, 'wrong_type', S(wrong)) end
  -- markers of the jobs just taken must not wake idle workers: when an RPOP found pending
  -- short of what it asked and no promoted job was left there (pending is empty), wake is
  -- emptied (a wrong-typed wake is left as it is); while pending holds ids, its markers
  -- are worth a claim
  if pendingDone and promoUsed >= #promo then redis.pcall('LTRIM', K_WAKE, '1', '0') end
  -- the worker was seen: P:{T}:workers scores it now (reap forgets it an hour later); a
  -- wrong-typed key is left as it is
  redis.pcall('ZADD', string.sub(prefix, 1, -5) .. 'workers', nowS, worker)
  return out, cIds, nc, more, vis, shared, leaseS
end
-- END include/claim_jobs.lua

-- BEGIN include/request_record.lua (generated by make lua; edit lua/include/request_record.lua)
-- Request records (docs/protocol.md, Request records): claim and settle_claim keep the
-- answer of a call in P:{T}:claimreq:<request> for its retries. A record names the worker
-- and the arguments of its call, answers only a call of that worker with those arguments,
-- and lives RECORD_MS at most (the visibility when shorter): the retry window, which the
-- caller's retries stay inside.
local RECORD_MS = 60000
-- recordLife(vis): how long the record of a call with visibility vis lives, in ms
local function recordLife(vis)
  if vis < RECORD_MS then return vis end
  return RECORD_MS
end
-- notOurs(request, what): the reply to a call whose request id holds the record of another
-- call (what says whose), changing nothing
local function notOurs(request, what)
  return bad('request', 'request id ' .. shown(request) .. ' ' .. what ..
    '; a request id is sent again only by its worker, with the same arguments')
end
-- madeBy(token): the request id a lease's claim_token ends with, as settle_claim writes it
-- (<claimed_at>:<#worker>:<worker>:<request>); nil when the token has no such layout.
-- Bounded: two plain finds and a length check
local function madeBy(token)
  local a = string.find(token, ':', 1, true)
  if not a then return nil end
  local b = string.find(token, ':', a + 1, true)
  if not b or b - a < 2 or b - a > 6 then return nil end
  local len = string.sub(token, a + 1, b - 1)
  if not string.find(len, '^%d+$') then return nil end
  local at = b + 1 + tonumber(len)
  if string.sub(token, at, at) ~= ':' then return nil end
  local request = string.sub(token, at + 1)
  if #request < 1 or #request > 256 then return nil end
  return request
end
-- recordBase(prefix): the record keys' prefix P:{T}:claimreq: from the job-key prefix
-- P:{T}:job:, nil when prefix does not end with job:
local function recordBase(prefix)
  if string.sub(prefix, -4) ~= 'job:' then return nil end
  return string.sub(prefix, 1, -5) .. 'claimreq:'
end
-- forget(base, tokens): delete the records of the calls that made leases the caller just
-- ended, tokens being a table whose keys are those leases' claim_tokens and base the
-- record keys' prefix P:{T}:claimreq: (one DEL). A caller holds a lease's token only from
-- the reply of the call that made it, so that call is answered and not sent again: its
-- record has no further use. A token of a claim lease names its slot token, for which
-- no record exists (tokens and request ids are fresh random values)
local function forget(base, tokens)
  local dels = {}
  for token in pairs(tokens) do
    local request = madeBy(token)
    if request then dels[#dels + 1] = base .. request end
  end
  if #dels > 0 then redis.call('DEL', unpack(dels)) end
end
-- END include/request_record.lua

-- arguments ------------------------------------------------------------------
local n = int(ARGV[2], 1, 1000)
if not n then return bad('n', 'expected an integer 1..1000, got ' .. shown(ARGV[2])) end
-- n as Redis reads a count: ARGV[2] itself unless written with leading zeros
local nS = ARGV[2]
if #nS > 1 and string.byte(nS, 1) == 48 then nS = S(n) end
local vis = int(ARGV[4], 0, MAXMS)
if not vis then
  return bad('visibility', 'expected an integer 0..10^15 ms, got ' .. shown(ARGV[4]))
end
if ARGV[5] == nil or #ARGV[5] < 1 or #ARGV[5] > 256 then
  return bad('request', 'expected a request id of 1..256 bytes, got ' .. shown(ARGV[5]))
end
local na = int(ARGV[6], 0, 1000)
if not na then return bad('acks', 'expected an integer 0..1000, got ' .. shown(ARGV[6])) end
local nf = int(ARGV[7], 0, 1000)
if not nf then return bad('fails', 'expected an integer 0..1000, got ' .. shown(ARGV[7])) end
if na + nf > 1000 then
  return bad('fails', 'acks + fails must be at most 1000, got ' .. na .. ' + ' .. nf)
end
local A0 = 7                -- ack i: id ARGV[A0 + 2i - 1], token ARGV[A0 + 2i]
local F0 = A0 + 2 * na      -- fail j: ARGV[F0 + 5j - 4 .. F0 + 5j]
if #ARGV ~= F0 + 5 * nf then
  return bad('arguments', 'n=' .. n .. ', acks=' .. na .. ', fails=' .. nf .. ' need exactly ' ..
    (2 * na + 5 * nf) .. ' arguments after ARGV[7] (2 per ack, 5 per fail), got ' ..
    math.max(#ARGV - 7, 0))
end
-- the lists a call leaves empty share one table, never written: a call without acks or
-- fails (a claim) makes none of them
local NONE = {}
local fMode, fBackoff = NONE, NONE
if nf > 0 then fMode, fBackoff = {}, {} end
for j = 1, nf do
  local at = F0 + 5 * j
  local mode = ARGV[at - 1]
  if mode ~= 'retry' and mode ~= 'dead' and mode ~= 'release' then
    return bad('mode', 'fail ' .. j .. ': expected "retry", "dead" or "release", got ' ..
      shown(mode))
  end
  local b = int(ARGV[at], -1, MAXMS)
  if not b then
    return bad('backoff', 'fail ' .. j .. ': expected an integer -1..10^15, got ' ..
      shown(ARGV[at]))
  end
  fMode[j], fBackoff[j] = mode, b
end
if #KEYS ~= 9 then
  return bad('keys', 'expected the 7 queue keys, the orphans key and the request key, got ' ..
    #KEYS)
end

local K_PENDING, K_PROCESSING, K_DELAYED, K_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_META, K_STATS, K_WAKE, K_REQUEST = KEYS[5], KEYS[6], KEYS[7], KEYS[9]
local prefix, worker, request = ARGV[1], ARGV[3], ARGV[5]

-- a retry of a request that was answered: the recorded answer ----------------------
-- one EXISTS tells whether the request record or delayed is there: in the steady state
-- neither is, and neither is read
local undue = nil
local packed = nil
if redis.call('EXISTS', K_REQUEST, K_DELAYED) == 0 then
  undue = NONE
else
  packed = redis.pcall('GET', K_REQUEST)
  if type(packed) == 'table' then
    if string.find(packed.err, 'WRONGTYPE', 1, true) then
      local t = redis.call('TYPE', K_REQUEST)
      if type(t) == 'table' then t = t.ok end
      if t == 'list' then return notOurs(request, 'names a claim call') end
    end
    return failure(packed, K_REQUEST, 'string')
  end
end
-- digest(): the digest of this call's arguments (every ARGV, byte for byte), which its
-- record keeps beside the worker, so a record answers only a retry of its own call
local function digest() return redis.sha1hex(cmsgpack.pack(ARGV)) end
if packed then
  -- the record is stored data: it is read only when it has the shape this script writes
  -- (more 0 or 1, counts a, f with a + f <= 1000, a string token, at most 1000 leases),
  -- so a damaged or hand-written one is answered in bounded steps, with an error
  local ok, record = pcall(cmsgpack.unpack, packed)
  -- a record names its worker and digest first; one of an earlier release begins with
  -- more (a number) and is answered without that check
  if ok and type(record) == 'table' and type(record[1]) == 'string' then
    if record[1] ~= worker then return notOurs(request, "belongs to another worker's call") end
    if record[2] ~= digest() then
      return notOurs(request, 'was sent with other arguments (n, visibility or settles)')
    end
    table.remove(record, 1)
    table.remove(record, 1)
  end
  local function whole(x, hi) return type(x) == 'number' and x >= 0 and x <= hi and x == math.floor(x) end
  if not ok or type(record) ~= 'table' or not whole(record[1], 1) or not whole(record[2], 1000)
    or not whole(record[3], 1000) or record[2] + record[3] > 1000
    or type(record[4]) ~= 'string' or #record > 4 + record[2] + record[3] + 1000 then
    return bad('request', 'the record of request ' .. shown(request) .. ' at ' .. K_REQUEST ..
      ' is not one settle_claim writes; delete it or send another request id')
  end
  local ra, rf = record[2], record[3]
  local token = record[4]
  local again = { record[1], token }
  for i = 1, ra do again[2 + i] = math.floor(tonumber(record[4 + i]) or 0) end
  for j = 1, rf do again[2 + ra + j] = tostring(record[4 + ra + j]) end
  for i = 5 + ra + rf, #record do
    local id = record[i]
    local key = prefix .. id
    local h = redis.pcall('HMGET', key, 'status', 'claim_token', 'payload', 'attempts',
      'lease_until')
    if h.err then return failure(h, key, 'hash') end
    if h[1] == 'processing' and h[2] == token and token ~= '' then
      local f = #again
      again[f + 1], again[f + 2], again[f + 3], again[f + 4] = id, h[3] or '',
        math.floor(tonumber(h[4]) or 0), math.floor(tonumber(h[5]) or 0)
    end
  end
  effects()
  -- a counter holding a non-number or a wrong-typed stats key must not fail the retry
  redis.pcall('HINCRBY', K_STATS, 'replayed', '1')
  return again
end

effects()
local now, nowS = clock()

-- settle part, reads ----------------------------------------------------------
local done = NONE            -- job keys settled by this call, when it names two or more
local twice = na + nf > 1
if twice then done = {} end
-- the reply, flat: more and the leases' token (set after the claim part), the ack results
-- at 2 + i, the fail outcomes at 2 + na + j, then the claim part appends id, payload,
-- attempts, lease_until per leased job
local reply = { 0, '' }
local aIds, aKeys = NONE, NONE
if na > 0 then aIds, aKeys = {}, {} end
-- histogram buckets: the first one and its count, then the others (made when needed)
local bFirst, cFirst, buckets, blist = nil, 0, NONE, NONE
local stale, unknown = 0, 0
local lastToken, lastAt = nil, nil -- the claimed_at the last token acked carries
local ended = NONE           -- the tokens of the leases this call ends (as keys)
local unlocks = NONE         -- {unique key, id} of the jobs this call ends holding one
if na + nf > 0 then ended = {} end
for i = 1, na do
  local id = ARGV[A0 + 2 * i - 1]
  local key = prefix .. id
  local h = redis.pcall('HMGET', key, 'claim_token', 'status', 'unique_key', 'unique_mode')
  if h.err then return failure(h, key, 'hash') end
  local token = ARGV[A0 + 2 * i]
  if h[2] == 'processing' and h[1] == token and not done[key] then
    if twice then done[key] = true end
    reply[2 + i] = 1
    aIds[#aIds + 1] = id
    aKeys[#aKeys + 1] = key
    if h[3] and not atClaim(h[4]) then
      if unlocks == NONE then unlocks = {} end
      unlocks[#unlocks + 1] = { h[3], id }
    end
    local at = lastAt
    if token ~= lastToken then
      at = claimedAt(token, key, now)
      lastToken, lastAt = token, at
      ended[token] = true
    end
    local b = log2floor(now - at)
    if b == bFirst then
      cFirst = cFirst + 1
    elseif not bFirst then
      bFirst, cFirst = b, 1
    else
      if buckets == NONE then buckets, blist = {}, {} end
      if buckets[b] then
        buckets[b] = buckets[b] + 1
      else
        buckets[b] = 1
        blist[#blist + 1] = b
      end
    end
  else
    reply[2 + i] = 0
    -- a job has a payload; only a job enqueued ready lacks a status
    if h[2] or redis.call('EXISTS', key) == 1 then
      stale = stale + 1
    else
      unknown = unknown + 1
    end
  end
end

local fIdx, fAtt, fErrs = NONE, NONE, NONE -- accepted fails' index j, attempts, errors
if nf > 0 then fIdx, fAtt, fErrs = {}, {}, {} end
local anyRetry, anyPolicy = false, false
local fOpt = NONE
if nf > 0 then fOpt = {} end
for j = 1, nf do
  local at = F0 + 5 * j
  local id = ARGV[at - 4]
  local key = prefix .. id
  local h = redis.pcall('HMGET', key, 'claim_token', 'status', 'attempts', 'max_attempts',
    'backoff_initial_ms', 'backoff_max_ms', 'backoff_multiplier', 'errors', 'unique_key',
    'unique_mode')
  if h.err then return failure(h, key, 'hash') end
  if h[2] == 'processing' and h[1] == ARGV[at - 3] and not done[key] then
    if twice then done[key] = true end
    ended[ARGV[at - 3]] = true
    fIdx[#fIdx + 1] = j
    fAtt[#fIdx] = num(h[3], 0)
    fErrs[#fIdx] = h[8]
    -- the job's per-job options (false where it has none)
    fOpt[#fIdx] = h
    if fMode[j] == 'retry' then
      anyRetry = true
      if fBackoff[j] == -1 then anyPolicy = true end
    end
  else
    reply[2 + na + j] = 'stale'
    stale = stale + 1
  end
end

-- one read of meta for everything the call needs from it
local settled = #aIds + #fIdx
local wantVis = vis == 0 and settled + stale + unknown > 0
local m, mVis, mRet = NONE, nil, nil
if anyRetry then
  local fields = {}
  m = {}
  if wantVis then fields[#fields + 1] = 'visibility_timeout_ms' end
  if #aIds > 0 then fields[#fields + 1] = 'completed_retention_ms' end
  fields[#fields + 1] = 'max_attempts'
  if anyPolicy then
    fields[#fields + 1] = 'backoff_initial_ms'
    fields[#fields + 1] = 'backoff_max_ms'
    fields[#fields + 1] = 'backoff_multiplier'
  end
  local r = redis.pcall('HMGET', K_META, unpack(fields))
  if r.err then return failure(r, K_META, 'hash') end
  for i = 1, #fields do m[fields[i]] = r[i] end
  mVis, mRet = m.visibility_timeout_ms, m.completed_retention_ms
elseif wantVis or #aIds > 0 then
  -- the common shapes name their fields directly: no table of names
  local r
  if not wantVis then
    r = redis.pcall('HMGET', K_META, 'completed_retention_ms')
  elseif #aIds > 0 then
    r = redis.pcall('HMGET', K_META, 'visibility_timeout_ms', 'completed_retention_ms')
  else
    r = redis.pcall('HMGET', K_META, 'visibility_timeout_ms')
  end
  if r.err then return failure(r, K_META, 'hash') end
  if wantVis then mVis, mRet = r[1], r[2] else mRet = r[1] end
end
if wantVis then
  vis = tonumber(mVis)
  if vis == nil or vis ~= vis or vis < 1 then vis = 30000 end
  if vis > MAXMS then vis = MAXMS end
  if vis % 1 ~= 0 then vis = math.floor(vis) end
end
local retention = 0
if #aIds > 0 then
  retention = tonumber(mRet)
  if retention == nil or retention ~= retention or retention < 1 then
    retention = 0
  elseif retention > MAXMS then
    retention = MAXMS
  end
  if retention % 1 ~= 0 then retention = math.floor(retention) end
end
local maxAtt = 5
if anyRetry then
  maxAtt = math.floor(num(m.max_attempts, 5))
  if maxAtt < 1 then maxAtt = 1 end
end

-- each accepted fail's outcome, grouped by where the job goes
local toPending, toFront, toDelayed, toDead = NONE, NONE, NONE, NONE
local fKeys, fIds = NONE, NONE
if #fIdx > 0 then
  toPending, toFront, toDelayed, toDead, fKeys, fIds = {}, {}, {}, {}, {}, {}
end
local earliestAt = nil
for k = 1, #fIdx do
  local j = fIdx[k]
  local at = F0 + 5 * j
  local id = ARGV[at - 4]
  fIds[k], fKeys[k] = id, prefix .. id
  local mode, attempts = fMode[j], fAtt[k]
  local outcome = 'dead'
  if mode == 'release' then
    outcome = 'pending'
    toFront[#toFront + 1] = k
  elseif mode == 'retry' and attempts < jobMaxAttempts(fOpt[k][4], maxAtt) then
    local backoff = fBackoff[j]
    if backoff == -1 then
      local o = fOpt[k]
      backoff = policyBackoff(attempts, o[5] or m.backoff_initial_ms, o[6] or m.backoff_max_ms,
        o[7] or m.backoff_multiplier)
    end
    if backoff == 0 then
      outcome = 'pending'
      toPending[#toPending + 1] = k
    else
      outcome = 'delayed'
      toDelayed[#toDelayed + 1] = { k, now + backoff }
      if earliestAt == nil or now + backoff < earliestAt then earliestAt = now + backoff end
    end
  else
    toDead[#toDead + 1] = k
  end
  reply[2 + na + j] = outcome
end

-- type checks for keys the settle part writes and the claim part may not
local e
if #toPending + #toFront + #toDelayed > 0 then
  e = expect(K_WAKE, 'list')
  if e then return e end
end
if #toDead > 0 then
  e = expect(K_DEAD, 'zset')
  if e then return e end
end
-- When the claim leases nothing and finds no orphan, it writes no counter: stats, which
-- the settle part writes, is checked before the claim's first write.
local check = settled + stale + unknown > 0 or nil
local gone = nil            -- the ended leases leave processing inside the claim part
if #fIdx > 0 then
  gone = {}
  for i = 1, #aIds do gone[i] = aIds[i] end
  for k = 1, #fIds do gone[#gone + 1] = fIds[k] end
elseif #aIds > 0 then
  gone = aIds
end


-- claim part (reads, then writes; a failure undoes its own writes) ------------------
local out, ids, nc, more, used, token, leaseS = claimJobs(n, nS, vis, worker, request, now,
  check, gone, undue, reply, nowS)
if not out then return ids end
if nc > 0 then
  vis = used
  reply[2] = token
end
reply[1] = more

-- settle part, writes (every key is known to be of its type by now) ----------------
-- counters use pcall: a counter holding a non-number must not fail a call whose changes
-- are already made
if #aIds > 0 then
  if retention > 0 then
    local retentionS = S(retention)
    for i = 1, #aKeys do
      redis.call('HSET', aKeys[i], 'status', 'done')
      redis.call('HDEL', aKeys[i], 'lease_until')
      redis.call('PEXPIRE', aKeys[i], retentionS)
    end
  else
    if #aKeys == 1 then redis.call('DEL', aKeys[1]) else redis.call('DEL', unpack(aKeys)) end
  end
  redis.pcall('HINCRBY', K_STATS, 'acked', #aIds == 1 and '1' or S(#aIds))
  if bFirst then
    redis.pcall('HINCRBY', K_STATS, 'h:' .. bFirst, cFirst == 1 and '1' or S(cFirst))
    tallyTime(bFirst, cFirst, now)
  end
  for i = 1, #blist do
    local b = blist[i]
    local c = buckets[b]
    redis.pcall('HINCRBY', K_STATS, 'h:' .. b, c == 1 and '1' or S(c))
    tallyTime(b, c, now)
  end
  tallyCount('a', #aIds, now)
end
if #fIdx > 0 then
  local before = nil
  if #toDelayed > 0 then before = earliest(K_DELAYED) end -- delayed is a zset: claim read it
  local markers = 0
  for k = 1, #fIdx do
    redis.call('HDEL', fKeys[k], 'lease_until')
  end
  if #toFront > 0 then
    -- given back: the next claim counts as the same attempt; last_error stays
    local front = {}
    for i = 1, #toFront do
      local k = toFront[i]
      local back = math.floor(fAtt[k]) - 1
      if back < 0 then back = 0 end
      redis.call('HSET', fKeys[k], 'status', 'pending', 'attempts', S(back))
      front[i] = fIds[k]
    end
    redis.call('RPUSH', K_PENDING, unpack(front))
    markers = markers + #front
    redis.pcall('HINCRBY', K_STATS, 'released', S(#front))
  end
  local failedN = #fIdx - #toFront
  if #toPending > 0 then
    local back = {}
    for i = 1, #toPending do
      local k = toPending[i]
      local err = ARGV[F0 + 5 * fIdx[k] - 2]
      redis.call('HSET', fKeys[k], 'status', 'pending', 'last_error', err,
        attemptError(fErrs[k], fAtt[k], nowS, err))
      back[i] = fIds[k]
    end
    redis.call('LPUSH', K_PENDING, unpack(back))
    markers = markers + #back
  end
  if #toDelayed > 0 then
    local z = {}
    for i = 1, #toDelayed do
      local k, at = toDelayed[i][1], toDelayed[i][2]
      local atS = S(at)
      local err = ARGV[F0 + 5 * fIdx[k] - 2]
      redis.call('HSET', fKeys[k], 'status', 'delayed', 'last_error', err, 'run_at', atS,
        attemptError(fErrs[k], fAtt[k], nowS, err))
      z[2 * i - 1] = atS
      z[2 * i] = fIds[k]
    end
    redis.call('ZADD', K_DELAYED, unpack(z))
  end
  if #toDead > 0 then
    local z = {}
    for i = 1, #toDead do
      local k = toDead[i]
      local err = ARGV[F0 + 5 * fIdx[k] - 2]
      redis.call('HSET', fKeys[k], 'status', 'dead', 'last_error', err, 'died_at', nowS,
        attemptError(fErrs[k], fAtt[k], nowS, err))
      z[2 * i - 1] = nowS
      z[2 * i] = fIds[k]
      local o = fOpt[k]
      if o[9] and not atClaim(o[10]) then
        if unlocks == NONE then unlocks = {} end
        unlocks[#unlocks + 1] = { o[9], fIds[k] }
      end
    end
    redis.call('ZADD', K_DEAD, unpack(z))
    redis.pcall('HINCRBY', K_STATS, 'dead_lettered', S(#toDead))
    tallyCount('d', #toDead, now)
  end
  if failedN > 0 then redis.pcall('HINCRBY', K_STATS, 'failed', S(failedN)) end
  tallyCount('f', failedN, now)
  if #toPending + #toDelayed > 0 then
    redis.pcall('HINCRBY', K_STATS, 'retried', S(#toPending + #toDelayed))
  end
  if markers > 0 then
    local w = {}
    for i = 1, markers do w[i] = '1' end
    redis.call('LPUSH', K_WAKE, unpack(w))
    redis.call('LTRIM', K_WAKE, '0', '1023')
  end
  wakeEarlier(K_WAKE, before, earliestAt)
end
if stale > 0 then redis.pcall('HINCRBY', K_STATS, 'stale', S(stale)) end
if unknown > 0 then redis.pcall('HINCRBY', K_STATS, 'unknown', S(unknown)) end
-- the jobs acked or dead-lettered here release the unique keys they held until done
for i = 1, #unlocks do unlock(unlocks[i][1], unlocks[i][2]) end

-- the records of the calls that made the leases this call ended: answered, no longer
-- needed
if settled > 0 and string.sub(K_REQUEST, -#request) == request then
  forget(string.sub(K_REQUEST, 1, #K_REQUEST - #request), ended)
end

-- the record a retry of this request is answered from (K_REQUEST was read: absent), one
-- MessagePack array: the worker, the digest of the arguments, more, a, f, the leases'
-- token, the ack results, the fail outcomes, the id of each lease
if nc > 0 or na + nf > 0 then
  local rec = { worker, digest(), more, na, nf, reply[2] }
  for i = 3, 2 + na + nf do rec[4 + i] = reply[i] end
  local at = 6 + na + nf
  for c = 1, nc do rec[at + c] = ids[c] end
  -- it lives the retry window: the visibility used, at most RECORD_MS (PXAT: no
  -- relative expiry for Redis to rewrite)
  redis.call('SET', K_REQUEST, cmsgpack.pack(rec), 'PXAT', S(now + recordLife(vis)))
end
return reply
