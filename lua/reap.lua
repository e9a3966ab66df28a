--[[
  reap: end expired leases (requeue or dead-letter), promote due delayed jobs, trim the
  dead set and put set-aside ids back once their job hash is there again.

  KEYS[1] P:{T}:pending      LIST  requeued jobs are RPUSHed (served next), promoted
                                   ones LPUSHed (back of the line); a job of priority
                                   p > 0 (its hash's `priority`) goes to
                                   P:{T}:pending:<p> (KEYS[1]..':'..p) instead
  KEYS[2] P:{T}:processing   ZSET  expired leases are read and removed
  KEYS[3] P:{T}:delayed      ZSET  due jobs are read and removed
  KEYS[4] P:{T}:dead         ZSET  dead-lettered jobs (scored now), trimmed
  KEYS[5] P:{T}:meta         HASH  max_attempts (overridden by the job hash's own, its
                                   per-job option), dead_retention_ms, dead_max_len,
                                   completed_retention_ms; `priorities` when a job goes
                                   to a priority's list
  KEYS[6] P:{T}:stats        HASH  counters reaped, dead_lettered, dead_trimmed, orphans,
                                   promoted, set_aside, restored, restored_purged, wrong_type,
                                   cancelled; own_reaped (of reaped, jobs with their own
                                   timeout_ms or visibility_timeout_ms)
  KEYS[7] P:{T}:wake         LIST  one marker per job put in pending, trimmed to 1024
  KEYS[8] P:{T}:orphans      ZSET  id -> ms it was set aside (ids whose hash is absent), or
                                   minus the ms purge forgot it (remembered 7 days)

  ARGV[1]  job-key prefix P:{T}:job:  (job keys are built as ARGV[1]..id)
  ARGV[2]  batch, 1..1000: the most entries examined of each kind (expired leases, due
           delayed jobs, set-aside ids)

  Returns: {requeued, dead_lettered, more, promoted, restored}, five integers; more is 1
           when a lease with lease_until <= now is still in processing, or a delayed job
           with run_at <= now is still in delayed, after this call (an entry this call
           put back from orphans scored <= now included).

  Takes up to batch processing entries with score <= now, earliest first. Each job hash
  is read with one HMGET of status, lease_until, attempts, max_attempts, errors,
  cancel_requested, priority and end_opts; unique_key, unique_mode, notify, timeout_ms and
  visibility_timeout_ms in a second only when end_opts is there. For each, the
  job hash decides: no job hash (no key, or a key that is not a hash) -> set aside
  (moved to orphans scored now, an id set aside before keeping its time; counted in
  `orphans` and `set_aside`, a wrong-typed key in `wrong_type` too, and never touched);
  status not `processing` (a hash without status is a pending job) -> entry removed,
  counted in `orphans`; hash lease_until > now -> entry re-scored to it,
  nothing else; the hash holds `cancel_requested` (manage.lua `cancel`) -> the job ends
  cancelled: hash kept with status `cancelled` for completed_retention_ms (PEXPIRE), or
  deleted when that is 0, counted in `cancelled` (not in `reaped`; neither retried nor
  dead); attempts >= max_attempts (below 1 counts as 1) -> dead with last_error
  "lease expired"; otherwise back to the front of pending with a wake marker.
  lease_until is removed from every job whose lease ends (claim_token stays: when and
  by whom the job was last claimed); a dead-lettered job gets died_at = now.
  A job that ends cancelled or dead here releases its unique key when it holds it until
  done (hash field unique_mode not until-started or debounce): P:{T}:unique:<unique_key>
  is deleted when it still names the id (GET, then DEL).
  Then takes up to batch delayed entries with score <= now, earliest first: status
  `delayed` -> status `pending`, LPUSHed to pending with a wake marker (`promoted`); no
  job hash -> set aside; other status -> removed (`orphans`).
  Then trims dead, oldest died_at first, at most 1000 entries per call: died_at < now -
  dead_retention_ms, then beyond dead_max_len (0 = no limit of that kind); a trimmed
  dead job's hash is deleted (`dead_trimmed`), an entry with no job hash is set aside,
  one whose status is not `dead` is only removed (`orphans`).
  Last, re-examines the ids in orphans: all of them when it holds at most batch, else
  batch of them at random (ZRANDMEMBER). An id whose job hash is back leaves orphans and
  goes where its status says (`restored`; `restored_purged` too when purge had forgotten
  it), with the job's own time from its hash as the score (ZADD NX: an entry already
  there is left as it is): `pending` (or no status) -> RPUSHed to pending (served next)
  with a wake marker; `processing` -> processing scored lease_until; `delayed` ->
  delayed scored run_at; `dead` -> dead scored died_at (each now when the field is
  absent or unreadable); any other status (`done`) -> only removed from orphans
  (`orphans`). An id with no job hash (absent, or a key that is not a hash) stays; one
  purge forgot more than 7 days ago is removed. Ids set aside or moved by this call are
  not examined again in it.

  History: counts the jobs dead-lettered (d) in P:{T}:hist:<kind>:<hour> (a hash per kind and hour since the
  epoch, the field the minute of the hour; the key built from ARGV[1] with `job:` replaced
  by `hist:`), expiring 25 h after its hour began (PEXPIREAT when a field is created);
  a wrong-typed key is left as it is.

  Attempt errors: an expired lease (requeued or dead-lettered) keeps the attempt's error in the job hash: `errors` + 1 and
  error:<errors mod 5 + 1> = <attempt>:<now ms>:lease expired (the last 5
  failed attempts' errors), in the same HSET.

  Workers: removes the workers P:{T}:workers scored more than an hour ago
  (ZREMRANGEBYSCORE; a wrong-typed key is left as it is).

  Outcomes (docs/protocol.md, Outcomes): a job dead-lettered or cancelled that carries
  `notify` is appended to P:{T}:done (XADD MAXLEN ~ 1000, field id), a cancelled one kept at least
  `notify` ms; when meta's events_max_len is N > 0, each expired lease requeued (event
  failed, error `lease expired`), dead-lettered (dead) or cancelled (cancelled) is
  appended to P:{T}:events (XADD MAXLEN ~ N).
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
-- END include/history.lua

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
if #ARGV ~= 2 then
  return rare().bad('arguments', 'expected 2 (prefix, batch), got ' .. #ARGV)
end
local batch = int(ARGV[2], 1, 1000)
if not batch then
  return rare().bad('batch', 'expected an integer 1..1000, got ' .. rare().shown(ARGV[2]))
end
if #KEYS ~= 8 then
  return rare().bad('keys', 'expected the 7 queue keys and the orphans key, got ' .. #KEYS)
end

local K_PENDING, K_PROCESSING, K_DELAYED, K_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_META, K_STATS, K_WAKE, K_ORPHANS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local prefix = ARGV[1]
local TRIM_MAX = 1000
-- how long an id purge forgot is remembered (a negative score in orphans), so that a job
-- hash coming back after the purge is still put back: 7 days
local TOMBSTONE_MS = 604800000

local now = clock()
local nowS = S(now)

-- read phase -----------------------------------------------------------------
local m = redis.pcall('HMGET', K_META, 'max_attempts', 'dead_retention_ms', 'dead_max_len',
  'completed_retention_ms', 'events_max_len')
local e = failure(m, K_META, 'hash')
if e then return e end
-- outcomes: the events stream's cap, nil (or false) when off
local eventsAt = (m[5] and outcomeLib().eventsCap(m[5]))
local maxAtt = math.floor(num(m[1], 5))
if maxAtt < 1 then maxAtt = 1 end
local retention = num(m[2], 604800000)
if retention < 0 then retention = 604800000 end
retention = math.floor(retention)
local maxLen = num(m[3], 10000)
if maxLen < 0 then maxLen = 10000 end
maxLen = math.floor(maxLen)
local keepDone = num(m[4], 0)
if keepDone < 1 then keepDone = 0 end
if keepDone > MAXMS then keepDone = MAXMS end
keepDone = math.floor(keepDone)

local due = redis.pcall('ZRANGEBYSCORE', K_PROCESSING, '-inf', nowS, 'LIMIT', '0', S(batch))
e = failure(due, K_PROCESSING, 'zset')
if e then return e end

local gone = {}            -- entries leaving processing
local rescore = {}         -- score, id pairs
local requeue, requeueKeys = {}, {}
local requeuePrio = {}     -- the priority of each requeued job: back to its own list
local readyPs = {}         -- the priorities whose lists this call pushes onto
local ownReaped = 0         -- of the requeued, jobs with their own options
local expiredErr = {} -- job key -> { attempts, errors } as read: the attempt's error
local dead, deadKeys, deadSet = {}, {}, {}
local cancelKeys = {}      -- expired leases of jobs whose cancellation was asked for
local unlocks = {}         -- {unique key, id} of the jobs that end here holding one until done
local cancelIds = {}       -- outcomes: their ids
local notifyOf = {}        -- outcomes: job key -> its `notify` field
local orphans = 0
local aside, asideSet = {}, {}   -- ids whose hash is absent: set aside, never forgotten
local wrong = 0                  -- of them, the ids whose job key is not a hash
local moved = {}                 -- ids this call moves: not restored in it too (their
                                 -- status was read before this call's own writes)
local function setAside(id)
  orphans = orphans + 1
  if not asideSet[id] then
    asideSet[id] = true
    aside[#aside + 1] = id
  end
end
-- absent(r, id, key): r is the reply of a redis.pcall() reading the job hash of id: nil
-- when the job is there (r holds its fields); else true when it is set aside (a job key
-- that is not a hash, or no key at all), or false with the error reply as second value.
-- A hash without status that exists is a pending job, not an absent one.
local function absent(r, id, key, st)
  if type(r) == 'table' and r.err then
    if not rare().wrongTyped(r) then return false, failure(r, key, 'hash') end
    if not asideSet[id] then wrong = wrong + 1 end
    setAside(id)
    return true
  end
  if st then return nil end
  if redis.call('EXISTS', key) == 1 then return nil end
  setAside(id)
  return true
end
for i = 1, #due do
  local id = due[i]
  local key = prefix .. id
  moved[id] = true
  local h = redis.pcall('HMGET', key, 'status', 'lease_until', 'attempts', 'max_attempts', 'errors',
    'cancel_requested', 'priority', 'end_opts')
  if not h.err then
    -- h[7..12]: unique_key, unique_mode, notify, timeout_ms, visibility_timeout_ms (read in
    -- a second HMGET only for a job that holds end_opts: include/job_options), priority
    local prio = h[7]
    if h[8] then
      local x = redis.call('HMGET', key, 'unique_key', 'unique_mode', 'notify', 'timeout_ms',
        'visibility_timeout_ms')
      h[7], h[8], h[9], h[10], h[11] = x[1], x[2], x[3], x[4], x[5]
    else
      h[7], h[8] = false, false
    end
    h[12] = prio
  end
  if not h.err and h[9] then notifyOf[key] = h[9] end
  local out
  out, e = absent(h, id, key, not h.err and h[1])
  if e then return e end
  local st, luS, attS = h[1], h[2], h[3]
  if out then
    gone[#gone + 1] = id
  elseif st ~= 'processing' then
    orphans = orphans + 1
    gone[#gone + 1] = id
  else
    local lu = tonumber(luS)
    if lu and lu > now then
      -- an integral score goes as a string (see nowS), anything else as it is
      if lu == math.floor(lu) and lu < 9007199254740992 then lu = S(lu) end
      rescore[#rescore + 1] = lu
      rescore[#rescore + 1] = id
    elseif h[6] then
      gone[#gone + 1] = id
      cancelKeys[#cancelKeys + 1] = key
      if h[7] and not uniqueLib().atClaim(h[8]) then unlocks[#unlocks + 1] = { h[7], id } end
      cancelIds[#cancelKeys] = id
    elseif num(attS, 0) >= jobMaxAttempts(h[4], maxAtt) then
      gone[#gone + 1] = id
      if h[7] and not uniqueLib().atClaim(h[8]) then unlocks[#unlocks + 1] = { h[7], id } end
      dead[#dead + 1] = id
      deadKeys[#deadKeys + 1] = key
      deadSet[id] = true
      expiredErr[key] = { attS, h[5] }
    else
      gone[#gone + 1] = id
      requeue[#requeue + 1] = id
      requeueKeys[#requeueKeys + 1] = key
      requeuePrio[#requeue] = priorityOf(h[12])
      readyPs[requeuePrio[#requeue]] = true
      expiredErr[key] = { attS, h[5] }
      if (h[10] or h[11]) and ownRun(h[10], h[11]) then ownReaped = ownReaped + 1 end
    end
  end
end

-- due delayed jobs, earliest first
local dueDelayed = redis.pcall('ZRANGEBYSCORE', K_DELAYED, '-inf', nowS, 'LIMIT', '0', S(batch))
e = failure(dueDelayed, K_DELAYED, 'zset')
if e then return e end
local promo, promoKeys, promoPrio = {}, {}, {}
for i = 1, #dueDelayed do
  local id = dueDelayed[i]
  local key = prefix .. id
  moved[id] = true
  local h = redis.pcall('HMGET', key, 'status', 'priority')
  local out
  out, e = absent(h, id, key, not h.err and h[1])
  if e then return e end
  local st = not h.err and h[1]
  if out then
    -- set aside
  elseif st == 'delayed' then
    promo[#promo + 1] = id
    promoKeys[#promoKeys + 1] = key
    promoPrio[#promo] = priorityOf(h[2])
    readyPs[promoPrio[#promo]] = true
  else
    orphans = orphans + 1
  end
end
local np = #promo

-- dead trimming plan, computed on the state this call leaves behind: the entries
-- dead-lettered now are the newest ones (died_at = now).
local nd = #dead
local trim, trimSet = {}, {}
local trimNew = 0          -- how many of this call's dead-lettered jobs are trimmed too
local deadChecked = false
if retention > 0 or maxLen > 0 then
  local rawCount = 0
  if retention > 0 then
    local r = redis.pcall('ZRANGEBYSCORE', K_DEAD, '-inf', string.format('(%d', now - retention),
      'LIMIT', '0', S(TRIM_MAX + nd))
    e = failure(r, K_DEAD, 'zset')
    if e then return e end
    deadChecked = true
    rawCount = #r
    for i = 1, rawCount do
      local id = r[i]
      if not deadSet[id] and #trim < TRIM_MAX then
        trim[#trim + 1] = id
        trimSet[id] = true
      end
    end
  end
  if maxLen > 0 and #trim < TRIM_MAX then
    local card = redis.pcall('ZCARD', K_DEAD)
    e = failure(card, K_DEAD, 'zset')
    if e then return e end
    deadChecked = true
    local already = 0
    if nd > 0 then
      local s = redis.call('ZMSCORE', K_DEAD, unpack(dead))
      for i = 1, nd do
        if s[i] then already = already + 1 end
      end
    end
    local over = card + nd - already - #trim - maxLen
    local want = math.min(over, TRIM_MAX - #trim)
    if want > 0 then
      local r = redis.call('ZRANGE', K_DEAD, '0', S(rawCount + nd + want - 1))
      local got = 0
      for i = 1, #r do
        if got == want then break end
        local id = r[i]
        if not trimSet[id] and not deadSet[id] then
          trim[#trim + 1] = id
          trimSet[id] = true
          got = got + 1
        end
      end
      trimNew = want - got   -- older entries ran out: trim some of the new ones
    end
  end
end

-- job hashes of the trimmed entries: the status decides whether the hash goes
local trimDel = {}
local trimmed = 0
for i = 1, #trim do
  local key = prefix .. trim[i]
  moved[trim[i]] = true
  local s = redis.pcall('HGET', key, 'status')
  local out
  out, e = absent(s, trim[i], key, s)
  if e then return e end
  if out then
    -- set aside
  elseif s == 'dead' then
    trimDel[#trimDel + 1] = key
    trimmed = trimmed + 1
  else
    orphans = orphans + 1
  end
end

-- set-aside ids whose hash is back: where their status says
local card = redis.pcall('ZCARD', K_ORPHANS)
e = failure(card, K_ORPHANS, 'zset')
if e then return e end
local back = {}                  -- ids leaving orphans
local settled = 0                -- of them, the ones that belong nowhere (done)
local fromPurged = 0             -- of the ones restored, ids purge had forgotten
local backPending, backPendingKeys, backPrio = {}, {}, {}
local backProcessing, backDelayed, backDead = {}, {}, {}  -- score, id pairs
local backDue = false            -- an entry put back in processing or delayed is due
-- the job's own time, from its hash, as a score: now when absent or unreadable (a hash
-- written by an earlier release), and whether it is due (<= now)
local function ownTime(v)
  local t = tonumber(v)
  if t and t == math.floor(t) and t >= 0 and t < 9007199254740992 then
    return S(t), t <= now
  end
  return nowS, true
end
if card > 0 then
  local cand
  if card <= batch then
    cand = redis.call('ZRANGE', K_ORPHANS, '0', '-1', 'WITHSCORES')
  else
    cand = redis.call('ZRANDMEMBER', K_ORPHANS, S(batch), 'WITHSCORES')
  end
  local forget = now - TOMBSTONE_MS
  for i = 1, #cand, 2 do
    local id, at = cand[i], tonumber(cand[i + 1])
    local key = prefix .. id
    local h = redis.pcall('HMGET', key, 'status', 'lease_until', 'run_at', 'died_at', 'priority')
    local st
    if h.err then
      -- a job key that is not a hash: the id stays set aside
      if not rare().wrongTyped(h) then return failure(h, key, 'hash') end
    else
      st = h[1]
      -- a job enqueued ready has no status: a hash without one that exists is pending
      if not st and redis.call('EXISTS', key) == 1 then st = 'pending' end
    end
    if st and not asideSet[id] and not moved[id] then
      back[#back + 1] = id
      local due, put = nil, true
      if st == 'pending' then
        backPending[#backPending + 1] = id
        backPendingKeys[#backPendingKeys + 1] = key
        backPrio[#backPending] = priorityOf(h[5])
        readyPs[backPrio[#backPending]] = true
      elseif st == 'processing' then
        backProcessing[#backProcessing + 1], due = ownTime(h[2])
        backProcessing[#backProcessing + 1] = id
      elseif st == 'delayed' then
        backDelayed[#backDelayed + 1], due = ownTime(h[3])
        backDelayed[#backDelayed + 1] = id
      elseif st == 'dead' then
        backDead[#backDead + 1] = ownTime(h[4])
        backDead[#backDead + 1] = id
      else
        orphans = orphans + 1
        settled = settled + 1
        put = false
      end
      if due then backDue = true end
      if put and at and at < 0 then fromPurged = fromPurged + 1 end
    elseif not st and at and at < 0 and -at < forget then
      -- purged over TOMBSTONE_MS ago and never back: forgotten for good
      back[#back + 1] = id
      settled = settled + 1
    end
  end
end
local restored = #back - settled

-- type checks for keys written without having been read
local nr = #requeue
local nb = #backPending
if nr > 0 or np > 0 or nb > 0 then
  e = expect(K_PENDING, 'list') or expect(K_WAKE, 'list') or prioLib().readyCheck(readyPs)
  if e then return e end
end
if (nd > 0 or #backDead > 0) and not deadChecked then
  e = expect(K_DEAD, 'zset')
  if e then return e end
end
if nr > 0 or nd > 0 or orphans > 0 or #trim > 0 or np > 0 or #back > 0 or #cancelKeys > 0 then
  e = expect(K_STATS, 'hash')
  if e then return e end
end

-- write phase ----------------------------------------------------------------
if #gone > 0 then redis.call('ZREM', K_PROCESSING, unpack(gone)) end
if #rescore > 0 then redis.call('ZADD', K_PROCESSING, unpack(rescore)) end
if nr > 0 then
  -- RPUSH in reverse so that the earliest expired lease is served first
  local rev, revPrio = {}, {}
  for i = nr, 1, -1 do
    rev[#rev + 1] = requeue[i]
    revPrio[#rev] = requeuePrio[i]
  end
  prioLib().readyPush('RPUSH', rev, revPrio)
  for i = 1, nr do
    redis.call('HDEL', requeueKeys[i], 'lease_until')
    local x = expiredErr[requeueKeys[i]]
    redis.call('HSET', requeueKeys[i], 'status', 'pending',
      attemptError(x[2], num(x[1], 0), nowS, 'lease expired'))
  end
  local marks = {}
  for i = 1, nr do marks[i] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(marks))
  redis.call('LTRIM', K_WAKE, '0', '1023')
end
if nd > 0 then
  local z = {}
  for i = 1, nd do
    z[2 * i - 1] = nowS
    z[2 * i] = dead[i]
  end
  redis.call('ZADD', K_DEAD, unpack(z))
  for i = 1, nd do
    redis.call('HDEL', deadKeys[i], 'lease_until')
    local x = expiredErr[deadKeys[i]]
    redis.call('HSET', deadKeys[i], 'status', 'dead', 'last_error', 'lease expired',
      'died_at', nowS, attemptError(x[2], num(x[1], 0), nowS, 'lease expired'))
  end
end
for i = 1, #cancelKeys do
  -- outcomes: a job with `notify` is kept at least that long
  local keep = keepDone
  if notifyOf[cancelKeys[i]] then keep = outcomeLib().keepFor(notifyOf[cancelKeys[i]], keepDone) end
  if keep > 0 then
    redis.call('HDEL', cancelKeys[i], 'lease_until')
    redis.call('HSET', cancelKeys[i], 'status', 'cancelled')
    redis.call('PEXPIRE', cancelKeys[i], S(keep))
  else
    redis.call('DEL', cancelKeys[i])
  end
end
for i = 1, #unlocks do uniqueLib().unlock(unlocks[i][1], unlocks[i][2]) end
-- outcomes: announce the ends of the expired leases
if eventsAt then
  if eventsAt then
    for i = 1, nr do outcomeLib().announce(requeue[i], 'failed', nil, eventsAt, 'lease expired') end
  end
end
for i = 1, nd do
  local notify = notifyOf[deadKeys[i]]
  if notify or eventsAt then outcomeLib().announce(dead[i], 'dead', notify, eventsAt, 'lease expired') end
end
for i = 1, #cancelKeys do
  local notify = notifyOf[cancelKeys[i]]
  if notify or eventsAt then outcomeLib().announce(cancelIds[i], 'cancelled', notify, eventsAt) end
end
-- every due entry leaves delayed: promoted, set aside or dropped
if #dueDelayed > 0 then redis.call('ZREM', K_DELAYED, unpack(dueDelayed)) end
if np > 0 then
  prioLib().readyPush('LPUSH', promo, promoPrio)
  for i = 1, np do redis.call('HSET', promoKeys[i], 'status', 'pending') end
end
if #trim > 0 then
  redis.call('ZREM', K_DEAD, unpack(trim))
  if #trimDel > 0 then redis.call('DEL', unpack(trimDel)) end
end
if trimNew > 0 then
  -- only this call's dead-lettered jobs remain to trim: take the oldest of them
  local r = redis.call('ZRANGE', K_DEAD, '0', S(trimNew - 1))
  local keys = {}
  for i = 1, #r do keys[i] = prefix .. r[i] end
  if #r > 0 then
    redis.call('ZREM', K_DEAD, unpack(r))
    redis.call('DEL', unpack(keys))
    trimmed = trimmed + #r
  end
end

if #back > 0 then
  redis.call('ZREM', K_ORPHANS, unpack(back))
  if nb > 0 then
    local rev, revPrio = {}, {}
    for i = nb, 1, -1 do
      rev[#rev + 1] = backPending[i]
      revPrio[#rev] = backPrio[i]
    end
    prioLib().readyPush('RPUSH', rev, revPrio)
  end
  -- NX: an entry already there (the job enqueued again meanwhile) is left as it is
  if #backProcessing > 0 then redis.call('ZADD', K_PROCESSING, 'NX', unpack(backProcessing)) end
  if #backDelayed > 0 then redis.call('ZADD', K_DELAYED, 'NX', unpack(backDelayed)) end
  if #backDead > 0 then redis.call('ZADD', K_DEAD, 'NX', unpack(backDead)) end
end
if #aside > 0 then rare().keepAside(K_ORPHANS, aside, nowS) end
-- one wake marker per job put in pending
local marks = np + nb
if marks > 0 then
  local m = {}
  for i = 1, marks do m[i] = '1' end
  redis.call('LPUSH', K_WAKE, unpack(m))
  redis.call('LTRIM', K_WAKE, '0', '1023')
end

-- counters use pcall: stats was type-checked before the first write, and a counter
-- holding a non-number must not fail a call whose changes are already made
if nr > 0 then redis.pcall('HINCRBY', K_STATS, 'reaped', S(nr)) end
if ownReaped > 0 then redis.pcall('HINCRBY', K_STATS, 'own_reaped', S(ownReaped)) end
if nd > 0 then redis.pcall('HINCRBY', K_STATS, 'dead_lettered', S(nd)) end
if #cancelKeys > 0 then redis.pcall('HINCRBY', K_STATS, 'cancelled', S(#cancelKeys)) end
tallyCount('d', nd, now)
if trimmed > 0 then redis.pcall('HINCRBY', K_STATS, 'dead_trimmed', S(trimmed)) end
if orphans > 0 then redis.pcall('HINCRBY', K_STATS, 'orphans', S(orphans)) end
if np > 0 then redis.pcall('HINCRBY', K_STATS, 'promoted', S(np)) end
if #aside > 0 then redis.pcall('HINCRBY', K_STATS, 'set_aside', S(#aside)) end
if restored > 0 then redis.pcall('HINCRBY', K_STATS, 'restored', S(restored)) end
if fromPurged > 0 then redis.pcall('HINCRBY', K_STATS, 'restored_purged', S(fromPurged)) end
if wrong > 0 then redis.pcall('HINCRBY', K_STATS, 'wrong_type', S(wrong)) end

local more = 0
-- an entry put back in processing or delayed scored <= now is work to do now
if backDue then more = 1 end
if #due == batch and redis.call('ZCOUNT', K_PROCESSING, '-inf', nowS) > 0 then more = 1 end
if #dueDelayed == batch and redis.call('ZCOUNT', K_DELAYED, '-inf', nowS) > 0 then more = 1 end
-- workers not seen by a claim for an hour are forgotten (P:{T}:workers, built from the
-- job-key prefix); a wrong-typed key is left as it is
redis.pcall('ZREMRANGEBYSCORE', string.sub(prefix, 1, -5) .. 'workers', '-inf',
  '(' .. S(now - 3600000))
return { nr, nd, more, np, restored }
