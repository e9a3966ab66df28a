--[[
  claim: lease up to n ready jobs to one worker.

  KEYS[1] P:{T}:pending      LIST  ids ready to claim (RPOP end is the front), priority 0;
                                   priority p of 1..9 has P:{T}:pending:<p>
                                   (KEYS[1]..':'..p): the lists meta's `priorities` names
                                   are popped highest first (strict), or by a weighted
                                   round robin (meta's priority_mode `weighted`: priority p
                                   weighs 2^p, turn by turn of meta's priority_turn); a
                                   promoted job goes behind its own priority's ids
  KEYS[2] P:{T}:processing   ZSET  id -> lease_until
  KEYS[3] P:{T}:delayed      ZSET  id -> run_at
  KEYS[4] P:{T}:dead         ZSET  (not touched)
  KEYS[5] P:{T}:meta         HASH  paused, rate_limit, rate_limit_per_key, priorities
                                   and, when ARGV[4] is 0, visibility_timeout_ms (for
                                   the leases of jobs without their own) read in one
                                   HMGET; priority_mode, priority_turn in a
                                   second when a priority above 0 is in play;
                                   priorities (the digits of lists found empty
                                   dropped) and priority_turn (advanced by the jobs
                                   claimed, weighted only) written when they change
  KEYS[6] P:{T}:stats        HASH  counters claimed, orphans, set_aside, wrong_type
  KEYS[7] P:{T}:wake         LIST  emptied when pending ran dry in the call (claim pushes none)
  KEYS[8] P:{T}:orphans      ZSET  id -> ms it was set aside (ids whose job hash is absent);
                                   an id purge forgot (negative score) is set aside anew
  KEYS[9] P:{T}:claimreq:<request>  LIST  the record of this claim request: its head
                                     <more>:<n>:<visibility>:<worker>, then id, claim_token
                                     per lease; lives the visibility, at most 60 s

  ARGV[1]        job-key prefix P:{T}:job:  (job keys are built as ARGV[1]..id)
  ARGV[2]        n, the most jobs to claim, 1..1000
  ARGV[3]        worker id, stored in the lease's claim_token
  ARGV[4]        visibility in ms, 0..10^15 (0 = meta visibility_timeout_ms, default 30000)
  ARGV[5]        request id, 1..256 bytes: the same for every retry of one claim
  ARGV[6..5+n]   exactly n tokens, one per slot, in slot order

  Each leased job's hash gets status `processing`, attempts + 1, lease_until and
  claim_token = <claimed_at>:<#worker>:<worker>:<token> (claimed_at in ms, #worker the
  byte length of ARGV[3] in decimal, token its slot's ARGV token): the lease's token,
  which ack, extend and fail compare byte for byte.

  Returns: {jobs, more}: jobs is an array of up to n jobs, each {id, payload, attempts,
           token, lease_until} (attempts and lease_until are integers, token the
           claim_token written), empty when nothing
           was claimed; more is the integer 1 when the call stopped at one of its bounds
           with fewer than n jobs and ready work may be left (call again at once rather
           than wait for a wake marker), else 0; or below 0 under a rate limit
           (see Rate limits below): no claim slot was left when the call ended, the
           next opens -more ms from now: call again then.
           A job with its own timeout_ms or visibility_timeout_ms (per-job options, see
           enqueue.lua) has 7 entries: {id, payload, attempts, token, lease_until,
           timeout_ms, visibility_timeout_ms}, the two integers 0 for an option it lacks;
           every other job has the 5 above.

  Per-job visibility: a job whose hash holds visibility_timeout_ms (an integer 1..10^15;
  another value counts as absent) is leased for that long, whatever ARGV[4]: its
  lease_until is now + its own visibility (the record then lives the longest lease
  length used, at most 60 s). Both options are read with the job's status, by the same
  command (no command of their own).

  Retry-safe: a claim that leased jobs records its ids and tokens in KEYS[9], after a
  head naming its more, n, visibility (ARGV[4] as a number, 0 for meta's) and worker
  (PEXPIRE = the visibility used, at most 60 s: the retry window). A call whose KEYS[9]
  holds a record claims nothing new. When the record's worker, n and visibility are the
  call's, it answers the recorded leases this request still holds (status processing
  with the recorded token; current attempts and lease_until), in the recorded order,
  with the recorded more, and counts `replayed`: a caller whose reply was lost repeats
  the call with the same request id, worker and arguments (fresh slot tokens are fine)
  and gets the same leases, with no attempt charged twice. Otherwise the call fails with
  `invalid request` and changes nothing; so does a request id whose key holds a
  settle_claim record (a string), and a record of another shape (a head that is neither
  of the two below, an even number of entries, more than 2001): stored data is read in
  bounded steps. A record whose head is more alone (written by an earlier release) is
  answered as before.

  First moves up to 100 due delayed jobs (earliest run_at first) to the back of pending.
  Then takes ids from the front of pending, at most n + 100 ids per call. An id whose
  job hash is absent (no key: during a Cluster slot migration the hash may be on the
  other node) or whose job key is not a hash is set aside: moved to orphans (scored now;
  an id set aside before keeps its time), counted in `orphans` and `set_aside`, and the
  second kind in `wrong_type` too (the key is never touched); the reaper puts it back
  once a job hash is there. A hash that exists without `status` is a pending job (one
  enqueued ready). An id whose status is not the list's (`delayed`, `pending`) is
  dropped and counted in `orphans`. Neither uses a slot. more = 1 when fewer than n jobs
  were claimed and either n + 100 ids left pending with pending still not empty, or 100
  due delayed ids were examined.
  When an RPOP found pending short of what it asked (pending ran dry) and no promoted
  job was left in pending, wake is emptied (LTRIM wake 1 0; a wrong-typed wake key is
  left as it is), so markers of jobs claimed do not wake idle workers for nothing.
  A failed call leaves every key as it was: a wrong-typed key is found by the first
  command on it, and what the call changed before (the RPOP of pending, the first
  counter) is undone before it fails.

  Paused queue: while meta (KEYS[5]) holds the field `paused` (see manage.lua), the call
  leases and promotes nothing (read with the rate limits and the priorities in one HMGET of meta per call), empties wake and answers
  no job with more 0.
  Rate limits (docs/protocol.md, Rate limits): meta `rate_limit` = <max>/<ms> caps the
  jobs leased in any window of ms, across every caller, logged in P:{T}:rate (ZSET,
  member <claimed_at>:<seq>, score claimed_at; built from ARGV[1] as workers is); a gate
  before anything is popped cuts n to the slots left, and with none leases and promotes
  nothing (counted `rate_limited`); a call that ends with no slot left answers more =
  -(ms until the next). meta `rate_limit_per_key` caps the jobs of each job `rate_key`
  alike (log P:{T}:rate:key:<key>): a job popped (or promoted) whose key has no slot
  left goes to delayed at its key's next slot (status delayed, run_at; 1 ms later per
  job of the key set aside before it in the call; no attempt charged; counted
  `rate_deferred`) and the call goes on within its n + 100 bound. A stored limit of
  another shape is no limit. The record keeps a negative more as 0.
  Unique keys: a leased job whose hash holds unique_key with unique_mode until-started or
  debounce releases it: P:{T}:unique:<unique_key> is deleted when it still names the id
  (GET, then DEL; docs/protocol.md, Unique keys).
  Workers: every call (paused or not, whether it leased anything) scores the worker now
  in P:{T}:workers (ZSET, the key built from ARGV[1] with `job:` replaced by `workers`;
  reap forgets workers unseen for an hour; a wrong-typed key is left as it is).
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
-- END include/request_record.lua

-- arguments ------------------------------------------------------------------
local n = int(ARGV[2], 1, 1000)
if not n then return rare().bad('n', 'expected an integer 1..1000, got ' .. rare().shown(ARGV[2])) end
-- n as Redis reads a count: ARGV[2] itself unless written with leading zeros
local nS = ARGV[2]
if string.byte(nS, 1) == 48 then nS = S(n) end
if #ARGV ~= 5 + n then
  return rare().bad('n', 'n=' .. n .. ' needs a request id and exactly ' .. n ..
    ' tokens after ARGV[4], got ' .. math.max(#ARGV - 5, 0) .. ' tokens')
end
local vis = int(ARGV[4], 0, MAXMS)
if not vis then
  return rare().bad('visibility', 'expected an integer 0..10^15 ms, got ' .. rare().shown(ARGV[4]))
end
if #ARGV[5] < 1 or #ARGV[5] > 256 then
  return rare().bad('request', 'expected a request id of 1..256 bytes, got ' .. rare().shown(ARGV[5]))
end
if #KEYS ~= 9 then
  return rare().bad('keys', 'expected the 7 queue keys, the orphans key and the request key, got ' ..
    #KEYS)
end

local K_STATS, K_REQUEST = KEYS[6], KEYS[9]
local prefix, worker = ARGV[1], ARGV[3]

-- a retry of a request that already leased jobs: answer what it still holds ------
-- the record's head: more, n, visibility (as given) and the worker, so a record answers
-- only a retry of its own call
-- (n and visibility as decimal numbers: the arguments themselves unless written otherwise)
local visS = ARGV[4]
if string.byte(visS, 1) == 48 and visS ~= '0' or string.byte(visS, 1) == 45 then visS = S(vis) end
local head = ':' .. nS .. ':' .. visS .. ':' .. worker
-- the record is stored data: read at most one entry more than claim writes (the head,
-- then an id and a token per lease, 1000 leases at most), and used only when it has that
-- shape
local record = redis.pcall('LRANGE', K_REQUEST, '0', '2001')
if record.err then
  if string.find(record.err, 'WRONGTYPE', 1, true) then
    local t = redis.call('TYPE', K_REQUEST)
    if type(t) == 'table' then t = t.ok end
    if t == 'string' then return notOurs(ARGV[5], 'names a settle_claim call') end
  end
  return failure(record, K_REQUEST, 'list')
end
if #record > 0 and (#record > 2001 or #record % 2 == 0) then
  return rare().bad('request', 'the record of request ' .. rare().shown(ARGV[5]) .. ' at ' .. K_REQUEST ..
    ' is not one claim writes; delete it or send another request id')
end
if #record > 0 then
  local first = record[1]
  -- a record of an earlier release holds more alone in its head: answered as it was
  if first ~= '0' and first ~= '1' then
    local more, rn, rvis = string.match(first, '^([01]):(%d+):(%d+):')
    if not more then
      return rare().bad('request', 'the record of request ' .. rare().shown(ARGV[5]) .. ' at ' .. K_REQUEST ..
        ' is not one claim writes; delete it or send another request id')
    end
    if string.sub(first, #more + #rn + #rvis + 4) ~= worker then
      return notOurs(ARGV[5], "belongs to another worker's call")
    end
    if string.sub(first, 2) ~= head then
      return notOurs(ARGV[5], 'was sent with other arguments (n=' .. rn .. ', visibility=' ..
        rvis .. ')')
    end
    first = more
  end
  local again = {}
  for i = 2, #record - 1, 2 do
    local id, token = record[i], record[i + 1]
    local key = prefix .. id
    local h = redis.pcall('HMGET', key, 'status', 'claim_token', 'payload', 'attempts',
      'lease_until', 'timeout_ms', 'visibility_timeout_ms')
    if h.err then return failure(h, key, 'hash') end
    if h[1] == 'processing' and h[2] == token then
      local job = { id, h[3] or '', math.floor(tonumber(h[4]) or 0), token,
        math.floor(tonumber(h[5]) or 0) }
      -- the job's own options, as the first call answered them
      local tmo, jvis = int(h[6], 1, MAXMS), int(h[7], 1, MAXMS)
      if tmo or jvis then job[6], job[7] = tmo or 0, jvis or 0 end
      again[#again + 1] = job
    end
  end
  -- a counter holding a non-number or a wrong-typed stats key must not fail the retry
  redis.pcall('HINCRBY', K_STATS, 'replayed', '1')
  return { again, first == '1' and 1 or 0 }
end

local now, nowS = clock()
local out, ids, nc, more, used = claimJobs(n, nS, vis, worker, 5, now, nil, nil, nil, nil, nowS)
if not out then return ids end
-- the record a retry of this request is answered from (K_REQUEST was read: absent); it
-- lives the retry window: the visibility used, at most RECORD_MS
if nc > 0 then
  -- a rate limit's wait (more < 0) is not kept: a retry answers more 0
  local rec = { (more > 0 and '1' or '0') .. head }
  for c = 1, nc do
    rec[2 * c] = ids[c]
    rec[2 * c + 1] = out[c][4]
  end
  redis.call('RPUSH', K_REQUEST, unpack(rec))
  local life = recordLife(used)
  redis.call('PEXPIRE', K_REQUEST, life == vis and visS or S(life))
end
return { out, more }
