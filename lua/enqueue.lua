--[[
  enqueue: add n jobs, each ready now or after a delay.

  KEYS[1] P:{T}:pending      LIST  jobs ready now are LPUSHed (claim RPOPs: FIFO); a job
                                   of priority p > 0 goes to P:{T}:pending:<p> instead
                                   (KEYS[1]..':'..p), and p joins meta's `priorities`
  KEYS[2] P:{T}:processing   (not touched)
  KEYS[3] P:{T}:delayed      ZSET  delayed jobs, scored now + delay_ms
  KEYS[4] P:{T}:dead         (not touched)
  KEYS[5] P:{T}:meta         HASH  `priorities` (only for jobs ready now with a priority > 0)
  KEYS[6] P:{T}:stats        HASH  counter enqueued
  KEYS[7] P:{T}:wake         LIST  one marker per job ready now, plus one when a delayed job
                                   added runs before every job delayed earlier (or
                                   delayed was empty); trimmed to 1024
  KEYS[7+i]                  job key of the i-th triple: exactly ARGV[1]..id, i = 1..n
                             (another key is refused: `invalid keys`, nothing written)

  ARGV[1]        job-key prefix P:{T}:job:
  ARGV[2]        n, 1..1000
  ARGV[3..2+3n]  n triples: id (1..1024 bytes, any bytes), payload (opaque bytes), delay_ms
                 (0..10^15, 0 = ready now; or `@` and a time in ms since the epoch,
                 0..10^15, read against the Redis clock: the delay is that time - now,
                 ready now when it is not in the future)
  ARGV[3+3n..]   optional unique block (docs/protocol.md, Unique keys): the word `unique`,
                 the mode (`until-started`, `until-done` or `debounce`), the window in ms
                 (0..10^15, 0 = none), then n keys, one per triple in triple order, each
                 1..1024 bytes (any bytes). A bad one: `invalid unique`, `invalid
                 unique_mode`, `invalid unique_for_ms` or `invalid unique_key`, nothing
                 written
  then           optional per-job options for every job of the call: the word `options`,
                 then name, value pairs, each name at most once, of max_attempts
                 (1..1000000), backoff_initial_ms, backoff_max_ms (0..10^15, max not below
                 initial when both are given), backoff_multiplier (decimal, 1..1000),
                 visibility_timeout_ms and timeout_ms (1..10^15), rate_key (1..256 bytes),
                 notify (1..10^15), priority (one digit 0..9: higher is claimed first; 0
                 the default).
                 Written into each new job's hash under the same names; the retry policy
                 overrides meta's for that job in fail, settle_claim and reap, its
                 visibility_timeout_ms is the length of its leases in claim, settle_claim
                 and extend, and claim and settle_claim answer both visibility_timeout_ms
                 and timeout_ms (the longest one run may take, which its worker
                 enforces). A bad one: `invalid options` or `invalid <name>`, nothing
                 written

  Returns: an array of n entries, in triple order: 1 enqueued, 0 when the id is already
           there (its job hash exists, whatever its status, or it came earlier in this
           call); nothing changes for a refused id. With the unique block, also
           {2, holder id}: refused, the key is held by that job (nothing changes for it),
           or {3, holder id}: debounce mode, the waiting holder took this triple's
           payload and delay (the last such triple of the call wins).

  Unique keys: P:{T}:unique:<key> (STRING, built from ARGV[1] with `job:` replaced by
  `unique:`) names the job that holds the key; PX the window when one is given. A key is
  held while its lock names a job whose hash holds unique_key = key and whose status is
  pending (or none), delayed, or processing when its mode is until-done; any other lock
  is free and taken over. A new job with a free key takes it (SET) and records
  unique_key and unique_mode in its hash. A debounce triple whose holder is pending or
  delayed replaces the holder's payload and its delay: delay 0 keeps it in pending (or
  moves it from delayed to pending, a wake marker), a delay > 0 puts it in delayed at
  now + delay (LREM from pending, O(length of pending)), run_at updated; the lock's
  window starts again (PEXPIRE, or PERSIST without one). A refused triple writes nothing.

  A new job ready now holds its payload and enqueued_at (ms, Redis clock): a job hash
  without `status` is pending. A new delayed job holds payload, status `delayed`,
  enqueued_at and run_at (ms, its score in delayed).
  `attempts` is absent until the first claim (absent counts as 0). Either also holds the
  call's per-job options, and end_opts = 1 when it has a unique key or one of the
  options notify, timeout_ms, visibility_timeout_ms (ack and settle_claim read those
  fields only for a job that holds it).

  History: counts the jobs enqueued (kind e) in P:{T}:hist:<kind>:<hour> (a hash per kind and hour since the
  epoch, the field the minute of the hour; the key built from ARGV[1] with `job:` replaced
  by `hist:`), expiring 25 h after its hour began (PEXPIREAT when a field is created);
  a wrong-typed key is left as it is.
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
-- END include/history.lua

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
-- END include/job_options.lua

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
-- the longest unique key, in bytes (docs/protocol.md, Unique keys)
local MAX_UNIQUE_KEY = 1024

-- arguments ------------------------------------------------------------------
local n = int(ARGV[2], 1, 1000)
if not n then return rare().bad('n', 'expected an integer 1..1000, got ' .. rare().shown(ARGV[2])) end
-- the unique block, when given, follows the triples: `unique`, mode, window, n keys
local at = 3 + 3 * n
local uMode, uFor, uAt -- uAt: the key of triple i is ARGV[uAt + i]
if ARGV[at] == 'unique' then
  if #ARGV < at + 2 + n then
    return rare().bad('unique', 'expected the mode, the window and ' .. n .. ' keys (one per triple) ' ..
      'after "unique", got ' .. (#ARGV - at) .. ' arguments')
  end
  uMode = ARGV[at + 1]
  if uMode ~= 'until-started' and uMode ~= 'until-done' and uMode ~= 'debounce' then
    return rare().bad('unique_mode', 'expected "until-started", "until-done" or "debounce", got ' ..
      rare().shown(uMode))
  end
  uFor = int(ARGV[at + 2], 0, MAXMS)
  if not uFor then
    return rare().bad('unique_for_ms', 'expected an integer 0..10^15 (0: no window), got ' ..
      rare().shown(ARGV[at + 2]))
  end
  uAt = at + 2
  for i = 1, n do
    local kl = #ARGV[uAt + i]
    if kl < 1 or kl > MAX_UNIQUE_KEY then
      return rare().bad('unique_key', 'triple ' .. i .. ': expected a key of 1..' .. MAX_UNIQUE_KEY ..
        ' bytes, got ' .. kl .. ' bytes')
    end
  end
  at = at + 3 + n
end
-- the per-job options block, when given, comes last (perJob counts both blocks in)
local opts, optN, e = jobOptions(at)
if opts then opts = withEndOpts(opts) end
if e then return e end
-- exactly n triples and n job keys (rare().perJob names what is wrong)
if #ARGV ~= at - 1 + optN or #KEYS ~= 7 + n then
  return rare().perJob(n, at - 3 * n - 1 + optN, 3, 'triple', 'id, payload, delay_ms')
end
local delays = {}
local absAt -- the triples whose delay_ms is an absolute time (`@<ms>`), by index
for i = 1, n do
  -- an id is 1..1024 bytes: every part of the system can carry it (a key, a log line, a
  -- worker's environment)
  local idLen = #ARGV[3 * i]
  if idLen < 1 or idLen > 1024 then
    return rare().bad('id', 'triple ' .. i .. ': expected an id of 1..1024 bytes, got ' .. idLen ..
      ' bytes')
  end
  local dv = ARGV[2 + 3 * i]
  local d
  if string.byte(dv, 1) == 64 then
    -- `@<ms>`: run at this time (ms since the epoch, Redis clock), read against TIME below
    d = int(string.sub(dv, 2), 0, MAXMS)
    if not d then
      return rare().bad('delay_ms', 'triple ' .. i .. ': expected @ and a time of 0..10^15 ms, got ' ..
        rare().shown(dv))
    end
    absAt = absAt or {}
    absAt[i] = d
  else
    d = int(dv, 0, MAXMS)
    if not d then
      return rare().bad('delay_ms', 'triple ' .. i .. ': expected an integer 0..10^15, got ' .. rare().shown(dv))
    end
  end
  delays[i] = d
  -- a key other than prefix..id would leave an id in pending with no hash to claim
  if KEYS[7 + i] ~= ARGV[1] .. ARGV[3 * i] then
    return rare().bad('keys', 'triple ' .. i .. ': job key ' .. rare().shown(KEYS[7 + i]) ..
      ' is not the prefix followed by the id ' .. rare().shown(ARGV[3 * i]))
  end
end

local K_DELAYED, K_STATS, K_WAKE = KEYS[3], KEYS[6], KEYS[7]
-- jobs ready now go to their priority's list (include/priority): KEYS[1] for 0
local prio = optionPriority(opts)
local K_PENDING = readyKey(prio)

-- read phase -----------------------------------------------------------------
local res = {}
local seen = {}
local ready, later, newKeys, newIdx = {}, {}, {}, {}
-- one EXISTS over every job key: when none exists (the usual case) no key can hold the
-- wrong type and every id is new; otherwise each key's type is read
local jobKeys = {}
for i = 1, n do jobKeys[i] = KEYS[7 + i] end
local anyExists = redis.call('EXISTS', unpack(jobKeys)) > 0
for i = 1, n do
  local key = KEYS[7 + i]
  local ty = 'none'
  if anyExists then
    ty = redis.call('TYPE', key)
    if type(ty) == 'table' then ty = ty.ok end
    if ty ~= 'none' and ty ~= 'hash' then return rare().wrongtype(key, 'hash', ty) end
  end
  if ty == 'none' and not seen[key] then
    seen[key] = true
    res[i] = 1
    newKeys[#newKeys + 1] = key
    newIdx[#newIdx + 1] = i
  else
    res[i] = 0
  end
end

-- unique keys: each new job's key is free (it takes its lock), or held by a job that
-- still holds it (the new job is refused, or in debounce mode replaces the holder's
-- payload and delay while the holder waits). A lock whose job no longer holds it (its
-- hash gone, or naming another key, or past the state its mode holds the key in) is free.
-- the tables only unique keys, delays or debounces fill are made when they are: until
-- then they are NONE, one empty table, only read
local NONE = {}
local payloadOf = NONE -- triple index -> the triple whose payload and delay it takes
local locks = nil      -- triple indexes of the new jobs that take their key's lock
local swaps = nil      -- the existing holders a debounce call replaces, in order
local uBase
if uAt then
  uBase = string.sub(ARGV[1], 1, -5) .. 'unique:'
  local byKey = {}     -- key -> false (free) or its holder { id, st, i (a job of this call), from }
  local keep, keepIdx = {}, {}
  for j = 1, #newIdx do
    local i = newIdx[j]
    local k = ARGV[uAt + i]
    local held = byKey[k]
    if held == nil then
      held = false
      local lk = uBase .. k
      local cur = redis.pcall('GET', lk)
      e = failure(cur, lk, 'string')
      if e then return e end
      if cur then
        local hh = redis.pcall('HMGET', ARGV[1] .. cur, 'status', 'unique_key', 'unique_mode',
          'priority')
        if not hh.err and hh[2] == k then
          local st = hh[1] or 'pending'
          if st == 'pending' or st == 'delayed' or (st == 'processing' and hh[3] ~= 'until-started' and hh[3] ~= 'debounce') then
            held = { id = cur, st = st, prio = priorityOf(hh[4]) }
          end
        end
      end
    end
    if held then
      if uMode == 'debounce' and held.st ~= 'processing' then
        res[i] = { 3, held.id }
        if held.i then
          if payloadOf == NONE then payloadOf = {} end
          payloadOf[held.i] = i
        else
          if not held.from then
            swaps = swaps or {}
            swaps[#swaps + 1] = held
          end
          held.from = i
        end
      else
        res[i] = { 2, held.id }
      end
    else
      held = { id = ARGV[3 * i], st = 'pending', i = i }
      keep[#keep + 1] = newKeys[j]
      keepIdx[#keepIdx + 1] = i
      locks = locks or {}
      locks[#locks + 1] = i
    end
    byKey[k] = held
  end
  newKeys, newIdx = keep, keepIdx
end

local nn = #newKeys
if nn == 0 and not swaps then return res end

local now, nowS = clock()
-- a run-at time in the past (or now) means ready now
if absAt then
  for i, at in pairs(absAt) do
    delays[i] = at > now and at - now or 0
  end
end
-- a job of this call a later one debounced takes the later one's payload and delay
for i, from in pairs(payloadOf) do delays[i] = delays[from] end

local firstAt -- the earliest run-at among the delayed jobs added
local runAt = NONE -- the run-at of each delayed job, by triple, as a decimal string
-- the holders a debounce call replaces: ready now (from delayed), or delayed anew
local outPending, outDelayed = false, false
-- holders made ready again go back to their own priority's list (include/priority)
local swapReady, swapPrio, swapPs = NONE, NONE, NONE
if swaps then
  swapReady, swapPrio, swapPs = {}, {}, {}
  for s = 1, #swaps do
    local w = swaps[s]
    local d = delays[w.from]
    if d > 0 then
      local at = now + d
      if firstAt == nil or at < firstAt then firstAt = at end
      w.runAt = S(at)
      later[#later + 1] = w.runAt
      later[#later + 1] = w.id
      if w.st ~= 'delayed' then
        outPending = true
        swapPs[w.prio] = true
      end
    elseif w.st == 'delayed' then
      swapReady[#swapReady + 1] = w.id
      swapPrio[#swapReady] = w.prio
      swapPs[w.prio] = true
      outDelayed = true
    end
  end
end
for j = 1, nn do
  local i = newIdx[j]
  local id = ARGV[3 * i]
  if delays[i] > 0 then
    local at = now + delays[i]
    if firstAt == nil or at < firstAt then firstAt = at end
    if runAt == NONE then runAt = {} end
    runAt[i] = S(at)
    later[#later + 1] = runAt[i]
    later[#later + 1] = id
  else
    ready[#ready + 1] = id
  end
end

-- type checks for keys written without having been read; the first write itself
-- reveals a wrong type for its key
e = expect(K_STATS, 'hash')
if e then return e end
if #ready > 0 or #later > 0 or #swapReady > 0 then
  e = expect(K_WAKE, 'list')
  if e then return e end
end
if #ready > 0 and prio > 0 then
  e = prioLib().readyCheck({ [prio] = true })
  if e then return e end
end
-- the earliest run-at before this call (reading it checks delayed's type)
local before
if #later > 0 or outDelayed then
  before, e = earliest(K_DELAYED)
  if e then return e end
end
-- a replaced holder leaves its priority's list, or joins it, before the first write
if outPending or #swapReady > 0 then
  if swapPs[0] then e = expect(KEYS[1], 'list') end
  if e then return e end
  e = prioLib().readyCheck(swapPs)
  if e then return e end
end

-- write phase ----------------------------------------------------------------
if #ready > 0 then
  local r = redis.pcall('LPUSH', K_PENDING, unpack(ready))
  e = failure(r, K_PENDING, 'list')
  if e then return e end
  if prio > 0 then prioLib().readyMark({ [prio] = true }) end
end
if #swapReady > 0 then prioLib().readyPush('LPUSH', swapReady, swapPrio) end
if #later > 0 then
  local r = redis.pcall('ZADD', K_DELAYED, unpack(later))
  e = failure(r, K_DELAYED, 'zset')
  if e then return e end
end
-- the holders a debounce call replaces (their new place is written above)
if swaps then
  for s = 1, #swaps do
    local w = swaps[s]
    local key = ARGV[1] .. w.id
    local d = delays[w.from]
    if d > 0 then
      if w.st ~= 'delayed' then redis.call('LREM', readyKey(w.prio), '0', w.id) end
      redis.call('HSET', key, 'payload', ARGV[3 * w.from + 1], 'status', 'delayed',
        'run_at', w.runAt)
    elseif w.st == 'delayed' then
      redis.call('ZREM', K_DELAYED, w.id)
      redis.call('HSET', key, 'payload', ARGV[3 * w.from + 1], 'status', 'pending')
    else
      redis.call('HSET', key, 'payload', ARGV[3 * w.from + 1])
    end
    -- the window starts again with each replacement (none: the lock lasts its mode)
    if uFor > 0 then
      redis.call('PEXPIRE', uBase .. ARGV[uAt + w.from], S(uFor))
    else
      redis.call('PERSIST', uBase .. ARGV[uAt + w.from])
    end
  end
end
for j = 1, nn do
  local i = newIdx[j]
  -- no `attempts` field (absent reads as 0); a job ready now has its payload and
  -- enqueued_at (no status means pending): the time stats reads the queue's latency from
  local payload = ARGV[3 * (payloadOf[i] or i) + 1]
  if uAt then
    if delays[i] > 0 then
      redis.call('HSET', newKeys[j], 'payload', payload, 'status', 'delayed',
        'enqueued_at', nowS, 'run_at', runAt[i], 'unique_key', ARGV[uAt + i], 'unique_mode', uMode,
        'end_opts', '1')
    else
      redis.call('HSET', newKeys[j], 'payload', payload, 'enqueued_at', nowS,
        'unique_key', ARGV[uAt + i], 'unique_mode', uMode, 'end_opts', '1')
    end
  elseif delays[i] > 0 then
    redis.call('HSET', newKeys[j], 'payload', payload, 'status', 'delayed',
      'enqueued_at', nowS, 'run_at', runAt[i])
  else
    redis.call('HSET', newKeys[j], 'payload', payload, 'enqueued_at', nowS)
  end
  if opts then redis.call('HSET', newKeys[j], unpack(opts)) end
end
-- the new jobs' locks, each naming its job (a window: PX)
if locks then
  for l = 1, #locks do
    local i = locks[l]
    if uFor > 0 then
      redis.call('SET', uBase .. ARGV[uAt + i], ARGV[3 * i], 'PX', S(uFor))
    else
      redis.call('SET', uBase .. ARGV[uAt + i], ARGV[3 * i])
    end
  end
end
if #ready + #swapReady > 0 then
  local marks = {}
  for j = 1, math.min(#ready + #swapReady, 1024) do marks[j] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(marks))
  redis.call('LTRIM', K_WAKE, '0', '1023')
end
wakeEarlier(K_WAKE, before, firstAt)
-- counters use pcall: stats was type-checked before the first write, and a counter
-- holding a non-number must not fail a call whose changes are already made
if nn > 0 then
  redis.pcall('HINCRBY', K_STATS, 'enqueued', S(nn))
  tallyCount('e', nn, now)
end
return res
