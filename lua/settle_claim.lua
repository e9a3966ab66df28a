--[[
  settle_claim: end the leases a worker just finished (ack or fail each) and claim its
  next jobs, in one call: a busy worker pays one round trip and one script call per job
  (per batch) instead of two.

  KEYS[1] P:{T}:pending      LIST  claim pops here; failed retries go to the back (LPUSH),
                                   released jobs to the front (RPUSH). Each priority p of
                                   1..9 has its own list, P:{T}:pending:<p>
                                   (KEYS[1]..':'..p), popped as claim.lua says; a job of
                                   priority p (its hash's `priority`) goes back to its own
                                   list; meta's `priorities` as in claim.lua
  KEYS[2] P:{T}:processing   ZSET  id -> lease_until: leases made and ended
  KEYS[3] P:{T}:delayed      ZSET  id -> run_at: due jobs promoted, retries with a backoff
  KEYS[4] P:{T}:dead         ZSET  id -> died_at: failures dead-lettered
  KEYS[5] P:{T}:meta         HASH  paused, rate_limit, rate_limit_per_key,
                                   visibility_timeout_ms (when ARGV[4] is 0),
                                   completed_retention_ms, max_attempts, backoff_* (the
                                   last two overridden by the job hash's fields of the
                                   same names, its per-job options)
  KEYS[6] P:{T}:stats        HASH  the counters of claim, ack and fail (own_h:<b>, own_stale
                                   included)
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
  then           optional: the word `results`, then pairs i, result: the result (0..65536
                 bytes) of the i-th ack (1..a, each at most once), as ack's results block

  Returns: one flat array: more (1, 0, or below 0 for a rate limit's wait, as claim); the token of every lease this call
           made (the claim_token written, '' when it made none); then a integers, the
           ack results in ack order (1 acked or 0 stale, as ack); then f strings, the
           fail outcomes in fail order (the new status `pending`, `delayed` or `dead`,
           or `stale`, as fail); then 4 entries per leased job: id, payload, attempts
           (integer), lease_until (integer ms). When a leased job has its own timeout_ms
           or visibility_timeout_ms (per-job options, see enqueue.lua), one more entry
           ends the reply: an array of 2 integers per leased job, in the order claimed,
           timeout_ms and visibility_timeout_ms (0 for an option the job lacks). So the
           reply's length is 2 + a + f + 4 x jobs, plus 1 exactly when that array is
           there; a replay answers it for the leases it answers.

  Per-job visibility: a job whose hash holds visibility_timeout_ms is leased for that
  long whatever ARGV[4], as by claim (the record then lives the longest lease length
  used, at most 60 s).

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
  A lease's claim_token names the request that made it: <claimed_at>:<#worker>:<worker>:@<request>
  (the `@` tells it from a claim lease's, whose token ends with its slot token); the call
  deletes the records of the requests that made the leases it acks or fails: their
  reply arrived (the caller holds the token), so they are not sent again.
  A failed call leaves every key as it was, as claim.

  Paused queue: while meta (KEYS[5]) holds the field `paused` (see manage.lua), its claim
  part leases and promotes nothing (read with the rate limits in one HMGET of meta per call), empties wake and answers
  no job with more 0; its acks and fails are applied as ever.
  Rate limits: the claim part keeps the queue's and the per-key rate limits exactly as
  claim does (see claim.lua), its acks and fails applied as ever. The record keeps a
  negative more as 0.
  An acked job is read with one HMGET of claim_token, status and end_opts; unique_key,
  unique_mode, notify, timeout_ms and visibility_timeout_ms with a second one only when
  end_opts is there (enqueue writes it with them).

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

  Outcomes (docs/protocol.md, Outcomes): its acks and fails announce their ends as ack and
  fail do (P:{T}:done for the final ends of jobs that carry `notify`, P:{T}:events when meta's
  events_max_len is set), events_max_len read with the call's read of meta (one HGET of
  meta when the call reads meta for nothing else: fails in modes dead and release only).
]]

-- BEGIN include/prelude.lua (generated by make lua; edit lua/include/prelude.lua)
-- The helpers every script shares. Error replies are part of the protocol
-- (docs/protocol.md, Errors): change their text only with the protocol.
-- Redis runs a script's whole body at every call, so each `local function` is made anew
-- each time (a closure: an allocation, and one more step for each local it captures). The
-- helpers of the common path are made so; those of errors and other rare paths are made
-- at their first use, by rare(): a call that meets none of them makes rare alone.
local MAXMS = 1000000000000000 -- 10^15: the largest ms any argument or setting takes

-- Effects replication, before the first write: Redis 7 and Valkey always replicate a
-- script's effects; 6.2 (no REDIS_VERSION_NUM) is told to
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end

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
-- So does Lua when it joins a number into a string (`'h:' .. 5`): S(x) there too
local function S(x) return string.format('%d', x) end
-- num(v, def): a setting read from a hash as a finite number, def when it is not one
local function num(v, def)
  v = tonumber(v)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return def end
  return v
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

-- The rare path's helpers, made at the first call of rare() (see above)
local RARE = nil
local function rare()
  if RARE then return RARE end
  local R = {}
  -- bad(name, detail): the reply for an invalid argument
  function R.bad(name, detail)
    return redis.error_reply('ERR jobqueue: invalid ' .. name .. ': ' .. detail)
  end
  -- shown(v): an argument as an error quotes it: "v" (40 bytes at most, control bytes as
  -- ?) or missing
  function R.shown(v)
    if v == nil or v == false then return 'missing' end
    if #v > 40 then v = string.sub(v, 1, 40) .. '...' end
    return '"' .. (string.gsub(v, '%c', '?')) .. '"'
  end
  -- perJob(n, at, width, unit, fields): for a script given n jobs, each as a unit of width
  -- ARGV (named by fields) after ARGV[at] and a job key after the 7 queue keys: the error
  -- when ARGV or KEYS does not hold exactly that many, else nil
  function R.perJob(n, at, width, unit, fields)
    if #ARGV ~= at + width * n then
      return R.bad('n', 'n=' .. n .. ' needs exactly ' .. n .. ' ' .. unit .. 's (' .. fields ..
        ') after ARGV[' .. at .. '], got ' .. math.max(#ARGV - at, 0) .. ' arguments')
    end
    if #KEYS ~= 7 + n then
      return R.bad('keys', 'n=' .. n .. ' needs ' .. (7 + n) ..
        ' keys (7 queue keys + one job key per ' .. unit .. '), got ' .. #KEYS)
    end
    return nil
  end
  -- wrongtype(key, want[, t]): the reply for a key that holds type t (read when not given)
  -- where want was expected
  function R.wrongtype(key, want, t)
    if not t then
      t = redis.call('TYPE', key)
      if type(t) == 'table' then t = t.ok end
    end
    return redis.error_reply('ERR jobqueue: key ' .. key .. ' holds the wrong type (' ..
      tostring(t) .. '), expected ' .. want)
  end
  -- keepAside(key, ids, nowS): ids whose job hash is absent go to the orphans zset, scored
  -- the time they were set aside: an id set aside earlier keeps its first time; one purge
  -- forgot (a negative score) is set aside anew
  function R.keepAside(key, ids, nowS)
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
  -- wrongTyped(r): true when r, a redis.pcall() reply, is a WRONGTYPE error: a job key
  -- that is not a hash, which claim and reap set aside like an absent hash
  function R.wrongTyped(r)
    return type(r) == 'table' and r.err ~= nil and string.find(r.err, 'WRONGTYPE', 1, true) ~= nil
  end
  RARE = R
  return R
end
-- failure(r, key, want): the error of a failed redis.pcall() reply r, naming key when it
-- holds the wrong type; nil when r is not an error
local function failure(r, key, want)
  if type(r) == 'table' and r.err then
    if string.find(r.err, 'WRONGTYPE', 1, true) then return rare().wrongtype(key, want) end
    return redis.error_reply(r.err)
  end
  return nil
end
-- expect(key, want): nil when key is absent or of type want, else the wrongtype reply;
-- for keys a call writes without having read them
local function expect(key, want)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  if t == want or t == 'none' then return nil end
  return rare().wrongtype(key, want, t)
end
-- END include/prelude.lua
-- BEGIN include/own_run.lua (generated by make lua; edit lua/include/own_run.lua)
-- Per-job runs: the scripts that end or extend a lease count the runs of jobs with their
-- own options apart.
-- ownRun(tmo, vis): whether a job's stored timeout_ms or visibility_timeout_ms (its
-- per-job options, docs/protocol.md) is one, an integer 1..10^15 ms. Such a job's leases
-- and run times are its own: the scripts count its acks' processing times, its expired
-- leases and its stale calls also apart (own_h:<b>, own_reaped, own_stale), which the
-- queue's visibility tuning (auto) takes out of what it learns from
local function ownRun(tmo, vis)
  if (tmo and int(tmo, 1, MAXMS)) or (vis and int(vis, 1, MAXMS)) then return true end
  return false
end
-- END include/own_run.lua
-- BEGIN include/delayed.lua (generated by make lua; edit lua/include/delayed.lua)
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
-- END include/delayed.lua

-- BEGIN include/priority.lua (generated by make lua; edit lua/include/priority.lua)
-- Priorities (docs/protocol.md, Priorities): a job's hash field `priority` (1..9; absent,
-- 0 or anything else: 0). Priority 0's ready ids are in KEYS[1], P:{T}:pending; priority
-- p's in P:{T}:pending:<p> (KEYS[1] .. ':' .. p, the same hash tag), each FIFO (LPUSH to
-- the back, RPOP from the front). meta's field `priorities` records which lists of
-- priorities 1..9 may hold ids, as their digits, highest first ("95"): every script that
-- pushes onto one adds its digit; claim drops the digit of a list it found empty. So a
-- claim reads which lists to pop from in the HMGET of meta it makes anyway.
-- priorityOf(v): a job's priority from its hash field as read (a string or false)
local function priorityOf(v)
  if v and #v == 1 then
    local b = string.byte(v)
    if b >= 49 and b <= 57 then return b - 48 end
  end
  return 0
end
-- readyKey(p): the list of priority p's ready ids
local function readyKey(p)
  if p == 0 then return KEYS[1] end
  return KEYS[1] .. ':' .. p
end
local TURN_WRAP = 1000000000000
-- The helpers below are made at their first use (prioLib()): a call that meets no priority
-- above 0 makes none of them.
local PRIO = nil
local function prioLib()
  if PRIO then return PRIO end
  -- readyDigits(s): the priorities 1..9 named by a `priorities` value, as a set p -> true
  local function readyDigits(s)
    local set = {}
    if s then
      for i = 1, #s do
        local p = priorityOf(string.sub(s, i, i))
        if p > 0 then set[p] = true end
      end
    end
    return set
  end
  -- readyRecord(set): the `priorities` value of a set p -> true (p 1..9), highest first
  local function readyRecord(set)
    local s = ''
    for p = 9, 1, -1 do
      if set[p] then s = s .. p end
    end
    return s
  end
  -- readyCheck(ps): before a call pushes onto the lists of the priorities in ps (p -> true):
  -- nil when they are lists (or absent), and, when a p > 0 is among them, that meta is a
  -- hash; else the wrongtype reply. Priority 0's list is the caller's to check, as before.
  local function readyCheck(ps)
    local hi = false
    for p in pairs(ps) do
      if p > 0 then
        hi = true
        local e = expect(readyKey(p), 'list')
        if e then return e end
      end
    end
    if hi then return expect(KEYS[5], 'hash') end
    return nil
  end
  -- readyMark(ps): after pushing onto the lists of the priorities in ps, adds those above 0
  -- to meta's `priorities` (one HGET, and one HSET when a digit is new; nothing for 0)
  local function readyMark(ps)
    local hi = false
    for p in pairs(ps) do
      if p > 0 then hi = true end
    end
    if not hi then return end
    local cur = redis.call('HGET', KEYS[5], 'priorities')
    local set = readyDigits(cur)
    for p in pairs(ps) do
      if p > 0 then set[p] = true end
    end
    local s = readyRecord(set)
    if s ~= cur then redis.call('HSET', KEYS[5], 'priorities', s) end
  end
  -- readyPush(cmd, ids, prios): cmd (LPUSH: the back of the line, RPUSH: the front) of ids,
  -- each onto its priority's list (prios[i] the priority of ids[i]; nil: all 0), the order
  -- of ids kept within a list; then readyMark. Lists and meta are checked by the caller.
  local function readyPush(cmd, ids, prios)
    if #ids == 0 then return end
    -- each command by name (the ACL lines of docs/operations.md list what scripts call)
    local function push(key, g)
      if cmd == 'RPUSH' then
        redis.call('RPUSH', key, unpack(g))
      else
        redis.call('LPUSH', key, unpack(g))
      end
    end
    if not prios then
      push(KEYS[1], ids)
      return
    end
    local groups, ps = {}, {}
    for i = 1, #ids do
      local p = prios[i] or 0
      if not groups[p] then
        groups[p] = {}
        ps[p] = true
      end
      local g = groups[p]
      g[#g + 1] = ids[i]
    end
    for p = 0, 9 do
      if groups[p] then push(readyKey(p), groups[p]) end
    end
    readyMark(ps)
  end
  -- TURN_WRAP: the weighted round robin's turn (meta's `priority_turn`) wraps here
  -- readyOrder(known, n, weighted, turn): the lists a claim of n pops, as a sequence of
  -- {p, cap}: priorities highest first, each list popped until it is empty (cap nil).
  -- known: the set of priorities whose list may hold ids (0 always). With weighted, the
  -- call's n slots are the turns turn .. turn + n - 1 of a round robin in which priority p
  -- has weight 2^p among the known ones (turn mod W walks the weights highest first): the
  -- sequence first takes each priority's share of the n (cap), highest first, then every
  -- list again, highest first, to fill what an empty list left.
  local function readyOrder(known, n, weighted, turn)
    local order = {}
    local desc = {}
    for p = 9, 0, -1 do
      if known[p] then desc[#desc + 1] = p end
    end
    if weighted and #desc > 1 then
      local w = 0
      for i = 1, #desc do w = w + 2 ^ desc[i] end
      local quota = {}
      for s = turn, turn + n - 1 do
        local r = s % w
        for i = 1, #desc do
          local wp = 2 ^ desc[i]
          if r < wp then
            quota[desc[i]] = (quota[desc[i]] or 0) + 1
            break
          end
          r = r - wp
        end
      end
      for i = 1, #desc do
        local q = quota[desc[i]]
        if q then order[#order + 1] = { desc[i], q } end
      end
    end
    for i = 1, #desc do order[#order + 1] = { desc[i], nil } end
    return order
  end
  PRIO = { readyDigits = readyDigits, readyRecord = readyRecord, readyCheck = readyCheck,
    readyMark = readyMark, readyPush = readyPush, readyOrder = readyOrder }
  return PRIO
end
-- END include/priority.lua
-- BEGIN include/unique.lua (generated by make lua; edit lua/include/unique.lua)
-- Unique keys (docs/protocol.md, Unique keys): a job enqueued with one records it in its
-- hash (`unique_key`, `unique_mode`); the lock P:{T}:unique:<key> names the job's id.
-- The helpers below are made at their first use (uniqueLib()): a call that meets no
-- unique key makes none of them.
local UNIQUE = nil
local function uniqueLib()
  if UNIQUE then return UNIQUE end
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
  UNIQUE = { atClaim = atClaim, unlock = unlock }
  return UNIQUE
end
-- END include/unique.lua

-- BEGIN include/history.lua (generated by make lua; edit lua/include/history.lua)
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
-- claimJobs(n, nS, vis, worker, tokenAt, now, check, gone, undue, flat, nowS, meta): steps 1 to 3 of
-- claim (docs/protocol.md) on KEYS[1..8]: promote due delayed jobs, lease up to n ready
-- jobs to worker (the c-th gets the caller's token ARGV[tokenAt + c]; with flat, every
-- lease gets the caller's token tokenAt itself), set aside or drop orphans, empty wake
-- when every ready list ran dry, release the unique key of each leased job that holds one
-- until it starts (docs/protocol.md, Unique keys); on a paused queue (meta's `paused` field)
-- it leases and promotes nothing and empties wake; under meta's rate limits it cuts n to the
-- queue's slots left (a gate before any pop), sets aside the jobs whose rate key has no slot
-- left (right after the pop) and answers more = -(ms to the next slot) when none is left.
-- Every call scores worker now in P:{T}:workers (built from
-- the job-key prefix, as the request records' keys). nS is n as Redis reads a count; vis 0 means meta's
-- visibility_timeout_ms (read with paused and the rest in the call's first HMGET of meta).
-- check(nc, orphans), when given,
-- runs after the reads and before the first write but the RPOPs: an error it returns
-- fails the call with every key as it was; check = true stands for the check that
-- stats is a hash (or absent) when the claim writes no counter. gone, when given, are ids to remove from
-- processing (leases the caller ends), removed before the new leases are added so the
-- set stays small. undue, when given, is an empty table: the caller knows delayed is
-- absent and it is not read. flat, when given, is a table each leased job is appended to
-- as id, payload, attempts, lease_until. nowS, when given, is now as a decimal string.
-- meta, when given, is the caller's HMGET reply of meta whose first four entries are
-- paused, rate_limit, rate_limit_per_key and priorities (read with the caller's own fields
-- in one HMGET), with vis not 0: meta is then not read again.
-- A job whose hash holds its own visibility_timeout_ms (per-job options: an integer
-- 1..10^15; anything else counts as absent) is leased for that long instead of vis; one
-- that holds its own timeout_ms or visibility_timeout_ms has both (0 for the one it
-- lacks) after lease_until in its claim entry, or, with flat, in opts. Both are read
-- with the job's status (HGETALL, HMGET of a promoted job): no command of their own.
-- Returns out, ids, nc, more, vis, token, opts (out: the jobs as claim replies them, or flat; ids: their ids in order, vis: the longest lease length used, token: with flat, the
-- claim_token of every lease made, else nil; opts: with flat, when a leased job has
-- options, timeout_ms, visibility_timeout_ms per leased job in order, else nil), or nil
-- and the error reply.
-- unclaim(pops, first, firstBy, err): what claimJobs wrote before it failed, undone: the
-- counter first taken back by firstBy (when first is given), the ids of pops (the RPOP
-- replies, in order, each as two entries: list, ids) pushed back where they were; returns
-- nil, err
local function unclaim(pops, first, firstBy, err)
  if first then
    -- a counter at zero was absent before (counters only ever grow)
    if redis.call('HINCRBY', KEYS[6], first, S(-firstBy)) == 0 then
      redis.call('HDEL', KEYS[6], first)
    end
  end
  for b = #pops - 1, 1, -2 do
    local ids = pops[b + 1]
    local back = {}
    for i = #ids, 1, -1 do back[#back + 1] = ids[i] end
    if #back > 0 then redis.call('RPUSH', pops[b], unpack(back)) end
  end
  return nil, err
end
-- The rate-limit helpers below are made at their first use (rateLib()): a call on a queue
-- without limits makes none of them.
local RATES = nil
local function rateLib()
  if RATES then return RATES end
  -- Rate limits (docs/protocol.md, Rate limits): a log per limit, a sorted set of the
  -- claims of the last window (member <claimed_at>:<seq>, score claimed_at), in
  -- P:{T}:rate (the queue's) and P:{T}:rate:key:<rate_key> (one per job key), trimmed and
  -- expiring a window after the last claim. Read-only until the write phase.
  -- rateOf(v): meta's `<max>/<ms>` setting as {max, per}, nil when absent or not one
  local function rateOf(v)
    if not v then return nil end
    local mx, per = string.match(v, '^(%d+)/(%d+)$')
    if not mx then return nil end
    mx, per = tonumber(mx), tonumber(per)
    if mx < 1 or per < 1 or mx > 1000000 or per > MAXMS then return nil end
    return { max = mx, per = per }
  end
  -- rateLog(key, per, now): how many claims key logs in the window (now - per, now]; nil
  -- and the error reply when key is no zset
  local function rateLog(key, per, now)
    local used = redis.pcall('ZCOUNT', key, '(' .. S(now - per), '+inf')
    if type(used) == 'table' then return nil, failure(used, key, 'zset') end
    return used
  end
  -- rateOldest(key, per, now): when the oldest claim key logs in the window was made (now
  -- when none)
  local function rateOldest(key, per, now)
    local r = redis.call('ZRANGEBYSCORE', key, '(' .. S(now - per), '+inf', 'WITHSCORES',
      'LIMIT', '0', '1')
    return tonumber(r[2]) or now
  end
  -- rateGate(prefix, v, now): the queue's limit (meta `rate_limit`, v) as {key, max, per,
  -- used, left}, nil when none is set, or nil and the error reply
  local function rateGate(prefix, v, now)
    local rate = rateOf(v)
    if not rate then return nil end
    rate.key = string.sub(prefix, 1, -5) .. 'rate'
    local used, e = rateLog(rate.key, rate.per, now)
    if e then return nil, e end
    rate.used, rate.left = used, rate.max - used
    return rate
  end
  -- keyFull(keyed, prefix, rk, id, now): whether the job id of rate key rk finds its key's
  -- slots used up (then it is noted in keyed.ids, to run at its key's next slot, one ms
  -- apart per id so their order is kept), else takes one of them; nil, err on a wrong type
  local function keyFull(keyed, prefix, rk, id, now)
    local log = keyed.logs[rk]
    if not log then
      local key = string.sub(prefix, 1, -5) .. 'rate:key:' .. rk
      local used, e = rateLog(key, keyed.per, now)
      if e then return false, e end
      log = { key = key, used = used, took = 0, later = 0 }
      keyed.logs[rk] = log
    end
    if log.used + log.took < keyed.max then
      log.took = log.took + 1
      return false
    end
    if not log.oldest then
      log.oldest = now
      if log.used > 0 then log.oldest = rateOldest(log.key, keyed.per, now) end
    end
    keyed.ids[#keyed.ids + 1] = id
    keyed.at[#keyed.ids] = log.oldest + keyed.per + log.later
    log.later = log.later + 1
    return true
  end
  -- rateTake(key, per, used, k, now, nowS): log k claims made now in a rate log that held
  -- used of them, trim what left the window and let the key expire a window from now
  local function rateTake(key, per, used, k, now, nowS)
    local z = {}
    for i = 1, k do
      z[2 * i - 1] = nowS
      z[2 * i] = nowS .. ':' .. S(used + i)
    end
    redis.call('ZADD', key, unpack(z))
    redis.call('ZREMRANGEBYSCORE', key, '-inf', S(now - per))
    redis.call('PEXPIRE', key, S(per))
  end
  RATES = { rateOf = rateOf, rateOldest = rateOldest, rateGate = rateGate,
    keyFull = keyFull, rateTake = rateTake }
  return RATES
end
local function claimJobs(n, nS, vis, worker, tokenAt, now, check, gone, undue, flat, nowS, meta)
  local K_PROCESSING, K_DELAYED = KEYS[2], KEYS[3]
  local K_META, K_STATS, K_WAKE, K_ORPHANS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
  local prefix = ARGV[1]
  nowS = nowS or S(now)
  -- a paused queue (meta holds a `paused` field) leases and promotes nothing; the caller's
  -- gone leases still leave processing, and wake is emptied (allDry below). One read of
  -- meta: paused, the rate limits (docs/protocol.md, Rate limits), the priorities whose
  -- lists may hold ids (include/priority) and, when vis is 0, the visibility; the priority
  -- mode below, when one is in play
  local m = meta
  if not m then
    if vis == 0 then
      m = redis.pcall('HMGET', K_META, 'paused', 'rate_limit', 'rate_limit_per_key',
        'priorities', 'visibility_timeout_ms')
    else
      m = redis.pcall('HMGET', K_META, 'paused', 'rate_limit', 'rate_limit_per_key',
        'priorities')
    end
    if m.err then return nil, failure(m, K_META, 'hash') end
  end
  local paused = m[1] ~= false
  if paused then n, undue = 0, {} end
  -- rate limit gate, before anything is popped: n cut to the slots left, none left
  -- leases and promotes nothing and answers the wait for the next slot
  local rate, e0 = nil, nil
  if not paused and m[2] then rate, e0 = rateLib().rateGate(prefix, m[2], now) end
  if e0 then return nil, e0 end
  if rate then
    if rate.left <= 0 then
      n, undue = 0, {}
    elseif rate.left < n then
      n, nS = rate.left, S(rate.left)
    end
  end
  -- per-key limit: the logs read so far (by key), the ids set aside and their run-at
  local keyed = nil
  if not paused and m[3] then keyed = rateLib().rateOf(m[3]) end
  if keyed then keyed.logs, keyed.ids, keyed.at = {}, {}, {} end
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
  -- the tables of promoted jobs are made when something is due; else they are due itself,
  -- empty and only read
  local promo, promoAtt, promoSet = due, nil, due
  local promoOf = due -- by priority: the indices in promo of its promoted jobs, in order
  local promoOpt = nil -- position in promo -> { timeout_ms, visibility_timeout_ms } stored
  if #due > 0 then promo, promoAtt, promoSet, promoOf = {}, {}, {}, {} end
  local promoUni = nil       -- by index in promo: a unique key released at the claim
  for i = 1, #due do
    local id = due[i]
    local key = prefix .. id
    local h = redis.pcall('HMGET', key, 'status', 'attempts', 'unique_key', 'unique_mode',
      'timeout_ms', 'visibility_timeout_ms', 'rate_key', 'priority')
    if h.err then
      if not rare().wrongTyped(h) then return nil, failure(h, key, 'hash') end
      -- a job key that is not a hash: set aside, the queue keeps flowing
      orphans, wrong = orphans + 1, wrong + 1
      aside = aside or {}
      aside[#aside + 1] = id
    elseif h[1] == 'delayed' then
      promo[#promo + 1] = id
      promoAtt[#promo] = h[2]
      if h[5] or h[6] then
        promoOpt = promoOpt or {}
        promoOpt[#promo] = { h[5], h[6] }
      end
      promoSet[id] = h[7] or true
      if h[3] and uniqueLib().atClaim(h[4]) then
        promoUni = promoUni or {}
        promoUni[#promo] = h[3]
      end
      -- a promoted job goes behind the ids of its own priority's list
      local pp = priorityOf(h[8])
      promoOf[pp] = promoOf[pp] or {}
      promoOf[pp][#promoOf[pp] + 1] = #promo
    else
      orphans = orphans + 1
      -- a hash without status that exists is a pending job: this entry is a stray one
      if not h[1] and redis.call('EXISTS', key) == 0 then
        aside = aside or {}
        aside[#aside + 1] = id
      end
    end
  end

  -- ids leave each list from its RPOP end: first the ids already there, then the
  -- promoted ones of that priority (they go behind them). The lists are taken in the
  -- order of readyOrder (include/priority): highest priority first, or by the weighted
  -- round robin's shares. The first RPOP is the first write of the call: it reveals a
  -- wrong-typed list before anything changed, and if a later check fails, unclaim()
  -- pushes the popped ids back where they were.
  local cIds, cKeys, cAtt, cPay = {}, {}, {}, {}
  -- the per-job options of the c-th job, when it has one: its timeout and visibility (ms)
  local cTmo, cVis = nil, nil
  local cUni = nil           -- by lease: the unique key released at this claim
  local taken = {}
  local pops = {}            -- the RPOP replies, in order, each as two entries: list, ids
  local budget = n + 100
  local popped = 0
  -- hi: a list of a priority above 0 is known to hold ids (without one, the list of
  -- priority 0 alone is read and meta's record is left as it is)
  local hi = m[4] ~= false
  for p in pairs(promoOf) do
    if p > 0 then hi = true end
  end
  -- known, with hi: the priorities whose lists may hold ids, 0 always; without hi nil,
  -- which stands for priority 0's alone
  local known = nil
  if hi then
    known = m[4] and prioLib().readyDigits(m[4]) or {}
    known[0] = true
    for p in pairs(promoOf) do known[p] = true end
  end
  -- the priority mode and the weighted turn matter only when a list above 0 is in play:
  -- read then, in a second HMGET of meta
  local weighted, turn = false, 0
  if hi and not paused then
    local mt = redis.call('HMGET', K_META, 'priority_mode', 'priority_turn')
    weighted = mt[1] == 'weighted'
    if weighted then turn = int(mt[2], 0, TURN_WRAP) or 0 end
  end
  -- the lists in the order they are popped, each {p, cap}; without hi nil: priority 0's
  -- list alone, no cap
  local order, nOrder = nil, 1
  if paused then
    nOrder = 0
  elseif hi then
    order = prioLib().readyOrder(known, n, weighted, turn)
    nOrder = #order
  end
  local dry = nil            -- priorities whose list an RPOP found short: empty now
  local promoNext = nil      -- by priority: how many of its promoted jobs were used
  local lv, got = 1, 0       -- the entry of order being popped, jobs it claimed so far

  while #cIds < n and popped < budget and lv <= nOrder do
    local p, cap = 0, nil
    if order then p, cap = order[lv][1], order[lv][2] end
    local want = n - #cIds
    if cap and cap - got < want then want = cap - got end
    local promos = promoOf[p]
    local used = (promoNext and promoNext[p]) or 0
    if want <= 0 then
      lv, got = lv + 1, 0
    elseif not (dry and dry[p]) then
      if budget - popped < want then want = budget - popped end
      local list = readyKey(p)
      local ids = redis.pcall('RPOP', list, want == n and nS or S(want))
      if not ids then
        ids = {}
      elseif ids.err then
        return unclaim(pops, nil, 0, failure(ids, list, 'list'))
      end
      pops[#pops + 1] = list
      pops[#pops + 1] = ids
      popped = popped + #ids
      if #ids < want then
        dry = dry or {}
        dry[p] = true
      end
      local before = #cIds
      for j = 1, #ids do
        local id = ids[j]
        local key = prefix .. id
        -- the whole hash: a ready job's is its payload alone, cheaper to read than three
        -- named fields
        local h = redis.pcall('HGETALL', key)
        if h.err then
          if not rare().wrongTyped(h) then return unclaim(pops, nil, 0, failure(h, key, 'hash')) end
          -- a job key that is not a hash: set aside (below), the queue keeps flowing
          wrong = wrong + 1
          h = {}
        end
        local st, att, pay, uk, um, rk = nil, nil, nil, nil, nil, nil
        local tmo, jvis = nil, nil
        for f = 1, #h, 2 do
          local name = h[f]
          if name == 'payload' then
            pay = h[f + 1]
          elseif name == 'enqueued_at' then
            -- nothing to read: tested second, as a ready job holds it beside its payload
          elseif name == 'status' then
            st = h[f + 1]
          elseif name == 'attempts' then
            att = h[f + 1]
          elseif name == 'unique_key' then
            uk = h[f + 1]
          elseif name == 'unique_mode' then
            um = h[f + 1]
          elseif name == 'timeout_ms' then
            tmo = h[f + 1]
          elseif name == 'visibility_timeout_ms' then
            jvis = h[f + 1]
          elseif name == 'rate_key' then
            rk = h[f + 1]
          end
        end
        -- a job enqueued ready has no status: a hash that exists without status is pending
        if not st and #h > 0 then st = 'pending' end
        if promoSet[id] and st == 'delayed' then st = 'pending' end -- promoted before the pop
        if st == 'pending' and not taken[key] then
          taken[key] = true
          -- per-key limit, right after the pop: a job whose key has no slot left waits
          -- in delayed for its key's next slot (not an attempt, not started)
          local full = false
          if keyed and rk then
            full, e0 = rateLib().keyFull(keyed, prefix, rk, id, now)
            if e0 then return unclaim(pops, nil, 0, e0) end
          end
          if not full then
            local c = #cIds + 1
            cIds[c], cKeys[c], cAtt[c], cPay[c] = id, key, att, pay or ''
            if tmo or jvis then
              tmo, jvis = int(tmo, 1, MAXMS), int(jvis, 1, MAXMS)
              if tmo or jvis then
                cTmo, cVis = cTmo or {}, cVis or {}
                cTmo[c], cVis[c] = tmo or 0, jvis or 0
              end
            end
            if uk and uniqueLib().atClaim(um) then
              cUni = cUni or {}
              cUni[c] = uk
            end
          end
        else
          orphans = orphans + 1
          if not st then
            aside = aside or {}
            aside[#aside + 1] = id
          end
        end
      end
      got = got + #cIds - before
    elseif promos and used < #promos then
      used = used + 1
      promoNext = promoNext or {}
      promoNext[p] = used
      popped = popped + 1
      local i = promos[used]
      local id = promo[i]
      local key = prefix .. id
      if taken[key] then
        orphans = orphans + 1 -- already claimed through an older copy in pending
      else
        taken[key] = true
        local rk = promoSet[id]
        local full = false
        if keyed and rk ~= true then
          full, e0 = rateLib().keyFull(keyed, prefix, rk, id, now)
          if e0 then return unclaim(pops, nil, 0, e0) end
        end
        if not full then
          local c = #cIds + 1
          cIds[c], cKeys[c], cAtt[c], cPay[c] = id, key, promoAtt[i], false
          got = got + 1
          local o = promoOpt and promoOpt[i]
          if o then
            local tmo, jvis = int(o[1], 1, MAXMS), int(o[2], 1, MAXMS)
            if tmo or jvis then
              cTmo, cVis = cTmo or {}, cVis or {}
              cTmo[c], cVis[c] = tmo or 0, jvis or 0
            end
          end
          if promoUni and promoUni[i] then
            cUni = cUni or {}
            cUni[c] = promoUni[i]
          end
        end
      end
    else
      lv, got = lv + 1, 0
    end
  end
  -- every list known found empty and every promoted job used: the queue ran dry (a
  -- paused queue counts as dry: its idle workers sleep)
  local allDry = true
  local left = nil           -- by priority: its promoted jobs not used, in order
  local top = known and 9 or 0 -- the priorities known may name: 0..9, or 0 alone without it
  for p = 0, top do
    if not known or known[p] then
      if not (dry and dry[p]) and not paused then allDry = false end
      local promos = promoOf[p]
      local used = (promoNext and promoNext[p]) or 0
      if promos and used < #promos then
        allDry = false
        local rest = {}
        for i = used + 1, #promos do rest[#rest + 1] = promo[promos[i]] end
        left = left or {}
        left[p] = rest
      end
    end
  end

  local nc = #cIds
  local more = 0
  if nc < n and #due == 100 then
    more = 1
  elseif nc < n and popped >= budget then
    for p = 0, top do
      if more == 0 and (not known or known[p]) and not (dry and dry[p]) and
          redis.call('LLEN', readyKey(p)) > 0 then
        more = 1
      end
    end
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
  -- leases of jobs with their own visibility: lease_until and its decimal string, by c
  local own, ownS = nil, nil
  if nc > 0 then
    -- meta's visibility, read above, when a job is leased for it
    if vis == 0 then
      vis = tonumber(m[5])
      if vis == nil or vis ~= vis or vis < 1 then vis = 30000 end
      if vis > MAXMS then vis = MAXMS end
      if vis % 1 ~= 0 then vis = math.floor(vis) end
    end
    lease = now + vis
    leaseS = S(lease)
    if cVis then
      own, ownS = {}, {}
      local longest = 0
      for c = 1, nc do
        local v = cVis[c]
        if v and v > 0 then
          own[c] = now + v
          ownS[c] = S(own[c])
          if v > longest then longest = v end
        elseif vis > longest then
          longest = vis
        end
      end
      vis = longest
    end
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
    if nc == 1 and not own then
      r = redis.pcall('ZADD', K_PROCESSING, leaseS, cIds[1])
    else
      local z = {}
      for c = 1, nc do
        z[2 * c - 1] = (own and ownS[c]) or leaseS
        z[2 * c] = cIds[c]
      end
      r = redis.pcall('ZADD', K_PROCESSING, unpack(z))
    end
    e = failure(r, K_PROCESSING, 'zset')
    if e then return unclaim(pops, first, firstBy, e) end
  end
  if left then
    for p, rest in pairs(left) do
      redis.call('LPUSH', readyKey(p), unpack(rest))
      for i = 1, #rest do
        local key = prefix .. rest[i]
        if not taken[key] then redis.call('HSET', key, 'status', 'pending') end
      end
    end
  end
  if #due > 0 then
    redis.call('ZREM', K_DELAYED, unpack(due))
  end
  -- rate limits: the claims made are logged; jobs whose key had no slot left wait in
  -- delayed for its next one (status delayed, attempts untouched)
  if keyed then
    for _, log in pairs(keyed.logs) do
      if log.took > 0 then rateLib().rateTake(log.key, keyed.per, log.used, log.took, now, nowS) end
    end
    local nk = #keyed.ids
    if nk > 0 then
      local z = {}
      for i = 1, nk do
        local atS = S(keyed.at[i])
        z[2 * i - 1], z[2 * i] = atS, keyed.ids[i]
        redis.call('HSET', prefix .. keyed.ids[i], 'status', 'delayed', 'run_at', atS)
      end
      redis.call('ZADD', K_DELAYED, unpack(z))
      redis.pcall('HINCRBY', K_STATS, 'rate_deferred', S(nk))
    end
  end
  if rate then
    if nc > 0 then rateLib().rateTake(rate.key, rate.per, rate.used, nc, now, nowS) end
    -- no slot left: the call answers how long until the next one opens, as more = -wait
    if rate.used + nc >= rate.max then
      local wait = rateLib().rateOldest(rate.key, rate.per, now) + rate.per - now
      if wait < 1 then wait = 1 end
      more = -wait
      if nc == 0 then redis.pcall('HINCRBY', K_STATS, 'rate_limited', '1') end
    end
  end
  -- a lease's claim_token: claimed_at, the worker (its length first) and the caller's token,
  -- <claimed_at>:<#worker>:<worker>:<token>; made once when every lease shares one token
  local stamp, shared = nil, nil
  if nc > 0 then
    stamp = nowS .. ':' .. S(#worker) .. ':' .. worker .. ':'
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
    local upto, uptoS = lease, leaseS
    if own and own[c] then upto, uptoS = own[c], ownS[c] end
    redis.call('HSET', cKeys[c], 'status', 'processing', 'claim_token', token,
      'attempts', attS, 'lease_until', uptoS)
    -- the job started: a unique key held until then is released
    if cUni and cUni[c] then uniqueLib().unlock(cUni[c], cIds[c]) end
    if flat then
      local f = #flat
      flat[f + 1], flat[f + 2], flat[f + 3], flat[f + 4] = cIds[c], cPay[c], att, upto
    elseif cTmo and cTmo[c] then
      out[c] = { cIds[c], cPay[c], att, token, upto, cTmo[c], cVis[c] }
    else
      out[c] = { cIds[c], cPay[c], att, token, upto }
    end
  end
  -- with flat, the options of every leased job, when one has some
  local opts = nil
  if flat and cTmo then
    opts = {}
    for c = 1, nc do
      opts[2 * c - 1], opts[2 * c] = cTmo[c] or 0, cVis[c] or 0
    end
  end
  if aside then rare().keepAside(K_ORPHANS, aside, nowS) end
  -- the other counters: stats is known to be a hash by now
  if nc > 0 and orphans > 0 then redis.pcall('HINCRBY', K_STATS, 'orphans', S(orphans)) end
  if aside then redis.pcall('HINCRBY', K_STATS, 'set_aside', S(#aside)) end
  if wrong > 0 then redis.pcall('HINCRBY', K_STATS, 'wrong_type', S(wrong)) end
  -- markers of the jobs just taken must not wake idle workers: when an RPOP found each
  -- list short of what it asked and no promoted job was left there (pending is empty),
  -- wake is emptied (a wrong-typed wake is left as it is); while a list holds ids, its
  -- markers are worth a claim
  if allDry then redis.pcall('LTRIM', K_WAKE, '1', '0') end
  -- meta's record of the lists that may hold ids: the digits of lists found empty go,
  -- those of lists promoted jobs were pushed onto come; the weighted turn advances by the
  -- jobs claimed (one HSET, only when something changed: never without priorities)
  local mw = nil
  if hi then
    local rec = {}
    for p = 1, 9 do
      if known[p] and (not (dry and dry[p]) or (left and left[p])) then rec[p] = true end
    end
    rec = prioLib().readyRecord(rec)
    if rec ~= (m[4] or '') then mw = { 'priorities', rec } end
  end
  if weighted and nc > 0 and nOrder > 1 then
    mw = mw or {}
    mw[#mw + 1] = 'priority_turn'
    mw[#mw + 1] = S((turn + nc) % TURN_WRAP)
  end
  if mw then redis.call('HSET', K_META, unpack(mw)) end
  -- the worker was seen: P:{T}:workers scores it now (reap forgets it an hour later); a
  -- wrong-typed key is left as it is
  redis.pcall('ZADD', string.sub(prefix, 1, -5) .. 'workers', nowS, worker)
  return out, cIds, nc, more, vis, shared, opts
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
  return rare().bad('request', 'request id ' .. rare().shown(request) .. ' ' .. what ..
    '; a request id is sent again only by its worker, with the same arguments')
end
-- madeBy(token): the request id a lease's claim_token ends with, as settle_claim writes it
-- (<claimed_at>:<#worker>:<worker>:@<request>); nil when the token has no such layout
-- (a claim lease's token ends with its slot token, no `@`). Bounded: two plain finds
-- and a length check
local function madeBy(token)
  local a = string.find(token, ':', 1, true)
  if not a then return nil end
  local b = string.find(token, ':', a + 1, true)
  if not b or b - a < 2 or b - a > 6 then return nil end
  local len = string.sub(token, a + 1, b - 1)
  if not string.find(len, '^%d+$') then return nil end
  local at = b + 1 + tonumber(len)
  if string.sub(token, at, at + 1) ~= ':@' then return nil end
  local request = string.sub(token, at + 2)
  if #request < 1 or #request > 256 then return nil end
  return request
end
-- forget(base, tokens): delete the records of the calls that made leases the caller just
-- ended, tokens being a table whose keys are those leases' claim_tokens and base the
-- record keys' prefix P:{T}:claimreq: (one DEL). A caller holds a lease's token only from
-- the reply of the call that made it, so that call is answered and not sent again: its
-- record has no further use. Only a token holding `:@` can name one: a claim lease's
-- ends with its slot token, for which no record exists, and costs one plain find
local function forget(base, tokens)
  local dels = nil
  for token in pairs(tokens) do
    local request = string.find(token, ':@', 1, true) and madeBy(token)
    if request then
      dels = dels or {}
      dels[#dels + 1] = base .. request
    end
  end
  if dels then redis.call('DEL', unpack(dels)) end
end
-- END include/request_record.lua
-- BEGIN include/outcomes.lua (generated by make lua; edit lua/include/outcomes.lua)
-- Outcomes (docs/protocol.md, Outcomes): what a job reports and how its end is announced.
-- A job enqueued with the option `notify` (ms) keeps its hash at least that long after it
-- ends, and its final end (acked, dead, cancelled) is appended to the capped stream
-- P:{T}:done (XADD MAXLEN ~ 1000, field id), which waiters follow with XREAD BLOCK.
-- A queue whose meta holds events_max_len N > 0 appends every end to the capped stream
-- P:{T}:events (XADD MAXLEN ~ N). Both keys are built from ARGV[1], P:{T}:job:, so they
-- share the queue's hash tag. Neither costs a command when unused: `notify` is read by
-- the HMGET of the job the script makes anyway (ack's and settle_claim's second one, of a
-- job that holds end_opts), events_max_len by its read of meta.
local MAX_RESULT = 65536       -- bytes of a result (ack, settle_claim)
local MAX_PROGRESS_TEXT = 256  -- bytes of a progress message (extend)
local MAX_EVENT_ERROR = 256    -- bytes of an error text copied into an event
local DONE_MAX_LEN = '1000'    -- entries P:{T}:done keeps (about: MAXLEN ~)
-- The helpers below are made at their first use (outcomeLib()): a call that meets no
-- result, progress, notify or events makes none of them.
local OUTCOMES = nil
local function outcomeLib()
  if OUTCOMES then return OUTCOMES end
  -- outcomeKey(name): P:{T}:<name> from the job-key prefix P:{T}:job:
  local function outcomeKey(name)
    return string.sub(ARGV[1], 1, -5) .. name
  end
  -- keepFor(notify, retention): how long (ms) the hash of a job that just ended is kept:
  -- the completed retention, or longer when the job carries `notify` (a waiter reads it);
  -- 0 deletes it
  local function keepFor(notify, retention)
    local k = int(notify, 1, MAXMS)
    if k and k > retention then return k end
    return retention
  end
  -- eventsCap(v): meta's events_max_len read as a stream cap, nil when events are off
  local function eventsCap(v)
    local x = tonumber(v)
    if x == nil or x ~= x or x < 1 then return nil end
    if x > 1000000000 then x = 1000000000 end
    return S(math.floor(x))
  end
  -- announce(id, kind, notify, cap, err): the end of job id (kind acked, failed, dead or
  -- cancelled): appended to P:{T}:done when the job carries `notify` (final ends only), and
  -- to P:{T}:events when cap (eventsCap) is set. A wrong-typed stream key never fails a call
  local function announce(id, kind, notify, cap, err)
    if notify and kind ~= 'failed' then
      redis.pcall('XADD', outcomeKey('done'), 'MAXLEN', '~', DONE_MAX_LEN, '*', 'id', id)
    end
    if cap then
      if err then
        if #err > MAX_EVENT_ERROR then err = string.sub(err, 1, MAX_EVENT_ERROR) end
        redis.pcall('XADD', outcomeKey('events'), 'MAXLEN', '~', cap, '*', 'id', id,
          'event', kind, 'error', err)
      else
        redis.pcall('XADD', outcomeKey('events'), 'MAXLEN', '~', cap, '*', 'id', id,
          'event', kind)
      end
    end
  end
  -- outcomeArgs(at, n, word): the optional block `word, i1, v1, …` of ARGV from ARGV[at] to
  -- the end (results: pairs index, bytes; progress: triples index, percent, message), i an
  -- index 1..n, each at most once, of the call's pairs. Returns a table index -> value
  -- (progress: {percent, message}), empty when ARGV[at] is not word; or nil and the error
  -- reply. The block is taken off ARGV, so the pair count checks see the pairs alone
  local function outcomeArgs(at, n, word)
    local out = {}
    if ARGV[at] ~= word then return out end
    local width = word == 'progress' and 3 or 2
    local k = #ARGV - at
    if k == 0 or k % width ~= 0 or k / width > n then
      return nil, rare().bad(word, 'expected ' .. (width == 3 and 'triples index, percent, message' or
        'pairs index, result') .. ' (at most ' .. n .. ') after ' .. rare().shown(word) .. ', got ' ..
        k .. ' arguments')
    end
    for j = at + 1, #ARGV, width do
      local i = int(ARGV[j], 1, n)
      if not i or out[i] then
        return nil, rare().bad(word, 'expected a pair index 1..' .. n .. ' given once, got ' .. rare().shown(ARGV[j]))
      end
      if width == 3 then
        local p = int(ARGV[j + 1], 0, 100)
        if not p then
          return nil, rare().bad('progress', 'expected a percent 0..100 for pair ' .. i .. ', got ' ..
            rare().shown(ARGV[j + 1]))
        end
        if #ARGV[j + 2] > MAX_PROGRESS_TEXT then
          return nil, rare().bad('progress', 'expected a message of at most ' .. MAX_PROGRESS_TEXT ..
            ' bytes for pair ' .. i .. ', got ' .. #ARGV[j + 2] .. ' bytes')
        end
        out[i] = { S(p), ARGV[j + 2] }
      else
        if #ARGV[j + 1] > MAX_RESULT then
          return nil, rare().bad('result', 'expected at most ' .. MAX_RESULT .. ' bytes for pair ' .. i ..
            ', got ' .. #ARGV[j + 1] .. ' bytes')
        end
        out[i] = ARGV[j + 1]
      end
    end
    for j = #ARGV, at, -1 do ARGV[j] = nil end
    return out
  end
  OUTCOMES = { keepFor = keepFor, eventsCap = eventsCap, announce = announce,
    outcomeArgs = outcomeArgs }
  return OUTCOMES
end
-- END include/outcomes.lua

-- arguments ------------------------------------------------------------------
local n = int(ARGV[2], 1, 1000)
if not n then return rare().bad('n', 'expected an integer 1..1000, got ' .. rare().shown(ARGV[2])) end
-- n as Redis reads a count: ARGV[2] itself unless written with leading zeros
local nS = ARGV[2]
if #nS > 1 and string.byte(nS, 1) == 48 then nS = S(n) end
local vis = int(ARGV[4], 0, MAXMS)
if not vis then
  return rare().bad('visibility', 'expected an integer 0..10^15 ms, got ' .. rare().shown(ARGV[4]))
end
if ARGV[5] == nil or #ARGV[5] < 1 or #ARGV[5] > 256 then
  return rare().bad('request', 'expected a request id of 1..256 bytes, got ' .. rare().shown(ARGV[5]))
end
local na = int(ARGV[6], 0, 1000)
if not na then return rare().bad('acks', 'expected an integer 0..1000, got ' .. rare().shown(ARGV[6])) end
local nf = int(ARGV[7], 0, 1000)
if not nf then return rare().bad('fails', 'expected an integer 0..1000, got ' .. rare().shown(ARGV[7])) end
if na + nf > 1000 then
  return rare().bad('fails', 'acks + fails must be at most 1000, got ' .. na .. ' + ' .. nf)
end
local A0 = 7                -- ack i: id ARGV[A0 + 2i - 1], token ARGV[A0 + 2i]
local F0 = A0 + 2 * na      -- fail j: ARGV[F0 + 5j - 4 .. F0 + 5j]
-- outcomes: the optional results block of the acks, taken off ARGV before the counts
-- are checked; the record's digest still covers it (ALL: every ARGV, kept only then)
local ALL = nil
if ARGV[F0 + 5 * nf + 1] == 'results' then
  ALL = {}
  for i = 1, #ARGV do ALL[i] = ARGV[i] end
end
local results = nil
if ARGV[F0 + 5 * nf + 1] == 'results' then
  local re
  results, re = outcomeLib().outcomeArgs(F0 + 5 * nf + 1, na, 'results')
  if not results then return re end
end
if #ARGV ~= F0 + 5 * nf then
  return rare().bad('arguments', 'n=' .. n .. ', acks=' .. na .. ', fails=' .. nf .. ' need exactly ' ..
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
    return rare().bad('mode', 'fail ' .. j .. ': expected "retry", "dead" or "release", got ' ..
      rare().shown(mode))
  end
  local b = int(ARGV[at], -1, MAXMS)
  if not b then
    return rare().bad('backoff', 'fail ' .. j .. ': expected an integer -1..10^15, got ' ..
      rare().shown(ARGV[at]))
  end
  fMode[j], fBackoff[j] = mode, b
end
if #KEYS ~= 9 then
  return rare().bad('keys', 'expected the 7 queue keys, the orphans key and the request key, got ' ..
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
local function digest() return redis.sha1hex(cmsgpack.pack(ALL or ARGV)) end
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
    return rare().bad('request', 'the record of request ' .. rare().shown(request) .. ' at ' .. K_REQUEST ..
      ' is not one settle_claim writes; delete it or send another request id')
  end
  local ra, rf = record[2], record[3]
  local token = record[4]
  local again = { record[1], token }
  local agOpt, anyOpt = {}, false
  for i = 1, ra do again[2 + i] = math.floor(tonumber(record[4 + i]) or 0) end
  for j = 1, rf do again[2 + ra + j] = tostring(record[4 + ra + j]) end
  for i = 5 + ra + rf, #record do
    local id = record[i]
    local key = prefix .. id
    local h = redis.pcall('HMGET', key, 'status', 'claim_token', 'payload', 'attempts',
      'lease_until', 'timeout_ms', 'visibility_timeout_ms')
    if h.err then return failure(h, key, 'hash') end
    if h[1] == 'processing' and h[2] == token and token ~= '' then
      local f = #again
      again[f + 1], again[f + 2], again[f + 3], again[f + 4] = id, h[3] or '',
        math.floor(tonumber(h[4]) or 0), math.floor(tonumber(h[5]) or 0)
      -- the job's own options, as the first call answered them
      local tmo, jvis = int(h[6], 1, MAXMS), int(h[7], 1, MAXMS)
      agOpt[#agOpt + 1] = tmo or 0
      agOpt[#agOpt + 1] = jvis or 0
      if tmo or jvis then anyOpt = true end
    end
  end
  if anyOpt then again[#again + 1] = agOpt end
  -- a counter holding a non-number or a wrong-typed stats key must not fail the retry
  redis.pcall('HINCRBY', K_STATS, 'replayed', '1')
  return again
end

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
-- outcomes: each accepted ack's `notify` and ack index, made for the first ack with one
local aNotify, aRow = NONE, NONE
if na > 0 then aIds, aKeys = {}, {} end
-- histogram buckets: the first one and its count, then the others (made when needed)
local bFirst, cFirst, buckets, blist = nil, 0, NONE, NONE
local stale, unknown = 0, 0
local ownB, ownStale = nil, 0 -- buckets and stale settles of jobs with their own options
local lastToken, lastAt = nil, nil -- the claimed_at the last token acked carries
local ended = NONE           -- the tokens of the leases this call ends (as keys)
local unlocks = NONE         -- {unique key, id} of the jobs this call ends holding one
if na + nf > 0 then ended = {} end
for i = 1, na do
  local id = ARGV[A0 + 2 * i - 1]
  local key = prefix .. id
  local h = redis.pcall('HMGET', key, 'claim_token', 'status', 'end_opts')
  if h.err then return failure(h, key, 'hash') end
  if h[3] then
    -- the fields the end of a job with such options reads (include/job_options)
    local x = redis.call('HMGET', key, 'unique_key', 'unique_mode', 'notify', 'timeout_ms',
      'visibility_timeout_ms')
    h[3], h[4], h[5], h[6], h[7] = x[1], x[2], x[3], x[4], x[5]
  end
  local token = ARGV[A0 + 2 * i]
  if h[2] == 'processing' and h[1] == token and not done[key] then
    if twice then done[key] = true end
    reply[2 + i] = 1
    aIds[#aIds + 1] = id
    aKeys[#aKeys + 1] = key
    if h[3] and not uniqueLib().atClaim(h[4]) then
      if unlocks == NONE then unlocks = {} end
      unlocks[#unlocks + 1] = { h[3], id }
    end
    if h[5] then
      if aNotify == NONE then aNotify = {} end
      aNotify[#aKeys] = h[5]
    end
    if results and results[i] then
      if aRow == NONE then aRow = {} end
      aRow[#aKeys] = i
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
    if (h[6] or h[7]) and ownRun(h[6], h[7]) then
      ownB = ownB or {}
      ownB[b] = (ownB[b] or 0) + 1
    end
  else
    reply[2 + i] = 0
    -- a job has a payload; only a job enqueued ready lacks a status
    if h[2] or redis.call('EXISTS', key) == 1 then
      stale = stale + 1
      if (h[6] or h[7]) and ownRun(h[6], h[7]) then ownStale = ownStale + 1 end
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
    'unique_mode', 'notify', 'timeout_ms', 'visibility_timeout_ms', 'priority')
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
    if (h[12] or h[13]) and ownRun(h[12], h[13]) then ownStale = ownStale + 1 end
  end
end

-- one read of meta for everything the call needs from it, the claim part's fields
-- (paused, the rate limits, the priorities) first: the claim part then reads none
local settled = #aIds + #fIdx
local wantVis = vis == 0 and settled + stale + unknown > 0
local m, mVis, mRet = NONE, nil, nil
local mEvents = nil -- outcomes: meta's events_max_len, read with the rest when settled > 0
local claimMeta = nil -- the HMGET reply whose first four entries are the claim part's
if anyRetry then
  local fields = { 'paused', 'rate_limit', 'rate_limit_per_key', 'priorities' }
  m = {}
  if wantVis then fields[#fields + 1] = 'visibility_timeout_ms' end
  if #aIds > 0 then fields[#fields + 1] = 'completed_retention_ms' end
  fields[#fields + 1] = 'events_max_len'
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
  mEvents = m.events_max_len
  claimMeta = r
elseif wantVis or #aIds > 0 then
  -- the common shapes name their fields directly: no table of names
  local r
  if not wantVis then
    r = redis.pcall('HMGET', K_META, 'paused', 'rate_limit', 'rate_limit_per_key',
      'priorities', 'completed_retention_ms', 'events_max_len')
  elseif #aIds > 0 then
    r = redis.pcall('HMGET', K_META, 'paused', 'rate_limit', 'rate_limit_per_key',
      'priorities', 'visibility_timeout_ms', 'completed_retention_ms', 'events_max_len')
  else
    r = redis.pcall('HMGET', K_META, 'paused', 'rate_limit', 'rate_limit_per_key',
      'priorities', 'visibility_timeout_ms', 'events_max_len')
  end
  if r.err then return failure(r, K_META, 'hash') end
  if wantVis and #aIds > 0 then
    mVis, mRet, mEvents = r[5], r[6], r[7]
  elseif wantVis then
    mVis, mEvents = r[5], r[6]
  else
    mRet, mEvents = r[5], r[6]
  end
  claimMeta = r
elseif #fIdx > 0 then
  -- outcomes: fails in modes dead and release alone, with a visibility given
  local r = redis.pcall('HMGET', K_META, 'paused', 'rate_limit', 'rate_limit_per_key',
    'priorities', 'events_max_len')
  if r.err then return failure(r, K_META, 'hash') end
  mEvents = r[5]
  claimMeta = r
end
local eventsAt = (mEvents and outcomeLib().eventsCap(mEvents))
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
-- a job back in line goes to its own priority's list (include/priority)
if #toFront + #toPending > 0 then
  local readyPs = {}
  for i = 1, #toFront do readyPs[priorityOf(fOpt[toFront[i]][14])] = true end
  for i = 1, #toPending do readyPs[priorityOf(fOpt[toPending[i]][14])] = true end
  e = prioLib().readyCheck(readyPs)
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
-- every lease of the call gets the token <claimed_at>:<#worker>:<worker>:@<request>
local out, ids, nc, more, used, token, opts = claimJobs(n, nS, vis, worker, '@' .. request, now,
  check, gone, undue, reply, nowS, claimMeta)
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
  -- outcomes: an acked job with `notify` is kept at least that long, with its result;
  -- the rest as the completed retention says
  local drop = {}
  for i = 1, #aKeys do
    local keep = retention
    if aNotify[i] then keep = outcomeLib().keepFor(aNotify[i], retention) end
    if keep > 0 then
      local result = aRow[i] and results[aRow[i]]
      if result then
        redis.call('HSET', aKeys[i], 'status', 'done', 'result', result)
      else
        redis.call('HSET', aKeys[i], 'status', 'done')
      end
      redis.call('HDEL', aKeys[i], 'lease_until')
      redis.call('PEXPIRE', aKeys[i], S(keep))
    else
      drop[#drop + 1] = aKeys[i]
    end
  end
  if #drop == 1 then redis.call('DEL', drop[1]) elseif #drop > 1 then redis.call('DEL', unpack(drop)) end
  for i = 1, #aKeys do
    if aNotify[i] or eventsAt then outcomeLib().announce(aIds[i], 'acked', aNotify[i], eventsAt) end
  end
  redis.pcall('HINCRBY', K_STATS, 'acked', #aIds == 1 and '1' or S(#aIds))
  tallyBuckets(bFirst, cFirst, buckets, blist, now)
  if ownB then
    for b, c in pairs(ownB) do redis.pcall('HINCRBY', K_STATS, 'own_h:' .. S(b), S(c)) end
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
    local front, frontPrio = {}, {}
    for i = 1, #toFront do
      local k = toFront[i]
      local back = math.floor(fAtt[k]) - 1
      if back < 0 then back = 0 end
      redis.call('HSET', fKeys[k], 'status', 'pending', 'attempts', S(back))
      front[i] = fIds[k]
      frontPrio[i] = priorityOf(fOpt[k][14])
    end
    prioLib().readyPush('RPUSH', front, frontPrio)
    markers = markers + #front
    redis.pcall('HINCRBY', K_STATS, 'released', S(#front))
  end
  local failedN = #fIdx - #toFront
  if #toPending > 0 then
    local back, backPrio = {}, {}
    for i = 1, #toPending do
      local k = toPending[i]
      local err = ARGV[F0 + 5 * fIdx[k] - 2]
      redis.call('HSET', fKeys[k], 'status', 'pending', 'last_error', err,
        attemptError(fErrs[k], fAtt[k], nowS, err))
      back[i] = fIds[k]
      backPrio[i] = priorityOf(fOpt[k][14])
    end
    prioLib().readyPush('LPUSH', back, backPrio)
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
      if o[9] and not uniqueLib().atClaim(o[10]) then
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
  -- outcomes: announce the failures retried and the jobs dead-lettered
  for k = 1, #fIdx do
    local o = reply[2 + na + fIdx[k]]
    local notify = fOpt[k][11]
    if fMode[fIdx[k]] ~= 'release' and (notify or eventsAt) then
      outcomeLib().announce(fIds[k], o == 'dead' and 'dead' or 'failed', notify, eventsAt,
        ARGV[F0 + 5 * fIdx[k] - 2])
    end
  end
end
if stale > 0 then redis.pcall('HINCRBY', K_STATS, 'stale', S(stale)) end
if unknown > 0 then redis.pcall('HINCRBY', K_STATS, 'unknown', S(unknown)) end
if ownStale > 0 then redis.pcall('HINCRBY', K_STATS, 'own_stale', S(ownStale)) end
-- the jobs acked or dead-lettered here release the unique keys they held until done
for i = 1, #unlocks do uniqueLib().unlock(unlocks[i][1], unlocks[i][2]) end

-- the records of the calls that made the leases this call ended: answered, no longer
-- needed
if settled > 0 and string.sub(K_REQUEST, -#request) == request then
  forget(string.sub(K_REQUEST, 1, #K_REQUEST - #request), ended)
end

-- the record a retry of this request is answered from (K_REQUEST was read: absent), one
-- MessagePack array: the worker, the digest of the arguments, more, a, f, the leases'
-- token, the ack results, the fail outcomes, the id of each lease
if nc > 0 or na + nf > 0 then
  -- a rate limit's wait (more < 0) is not kept: a retry answers more 0
  local rec = { worker, digest(), more > 0 and 1 or 0, na, nf, reply[2] }
  for i = 3, 2 + na + nf do rec[4 + i] = reply[i] end
  local at = 6 + na + nf
  for c = 1, nc do rec[at + c] = ids[c] end
  -- it lives the retry window: the visibility used, at most RECORD_MS (PXAT: no
  -- relative expiry for Redis to rewrite)
  redis.call('SET', K_REQUEST, cmsgpack.pack(rec), 'PXAT', S(now + recordLife(vis)))
end
-- the leased jobs' own options, when one has some: one array after the leases
if opts then reply[#reply + 1] = opts end
return reply
