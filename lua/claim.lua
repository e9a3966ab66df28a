--[[
  claim: lease up to n ready jobs to one worker.

  KEYS[1] P:{T}:pending      LIST  ids ready to claim (RPOP end is the front)
  KEYS[2] P:{T}:processing   ZSET  id -> lease_until
  KEYS[3] P:{T}:delayed      ZSET  id -> run_at
  KEYS[4] P:{T}:dead         ZSET  (not touched)
  KEYS[5] P:{T}:meta         HASH  visibility_timeout_ms (read when ARGV[4] is 0)
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
           than wait for a wake marker), else 0.

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
  leases and promotes nothing (one HEXISTS of meta per call), empties wake and answers
  no job with more 0.
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
if string.byte(nS, 1) == 48 then nS = S(n) end
if #ARGV ~= 5 + n then
  return bad('n', 'n=' .. n .. ' needs a request id and exactly ' .. n ..
    ' tokens after ARGV[4], got ' .. math.max(#ARGV - 5, 0) .. ' tokens')
end
local vis = int(ARGV[4], 0, MAXMS)
if not vis then
  return bad('visibility', 'expected an integer 0..10^15 ms, got ' .. shown(ARGV[4]))
end
if #ARGV[5] < 1 or #ARGV[5] > 256 then
  return bad('request', 'expected a request id of 1..256 bytes, got ' .. shown(ARGV[5]))
end
if #KEYS ~= 9 then
  return bad('keys', 'expected the 7 queue keys, the orphans key and the request key, got ' ..
    #KEYS)
end

local K_STATS, K_REQUEST = KEYS[6], KEYS[9]
local prefix, worker = ARGV[1], ARGV[3]

-- a retry of a request that already leased jobs: answer what it still holds ------
-- the record's head: more, n, visibility (as given) and the worker, so a record answers
-- only a retry of its own call
local head = ':' .. S(n) .. ':' .. S(vis) .. ':' .. worker
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
  return bad('request', 'the record of request ' .. shown(ARGV[5]) .. ' at ' .. K_REQUEST ..
    ' is not one claim writes; delete it or send another request id')
end
if #record > 0 then
  local first = record[1]
  -- a record of an earlier release holds more alone in its head: answered as it was
  if first ~= '0' and first ~= '1' then
    local more, rn, rvis = string.match(first, '^([01]):(%d+):(%d+):')
    if not more then
      return bad('request', 'the record of request ' .. shown(ARGV[5]) .. ' at ' .. K_REQUEST ..
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
      'lease_until')
    if h.err then return failure(h, key, 'hash') end
    if h[1] == 'processing' and h[2] == token then
      again[#again + 1] = { id, h[3] or '', math.floor(tonumber(h[4]) or 0), token,
        math.floor(tonumber(h[5]) or 0) }
    end
  end
  effects()
  -- a counter holding a non-number or a wrong-typed stats key must not fail the retry
  redis.pcall('HINCRBY', K_STATS, 'replayed', '1')
  return { again, first == '1' and 1 or 0 }
end

effects()
local out, ids, nc, more, used = claimJobs(n, nS, vis, worker, 5, clock(), nil)
if not out then return ids end
-- the record a retry of this request is answered from (K_REQUEST was read: absent); it
-- lives the retry window: the visibility used, at most RECORD_MS
if nc > 0 then
  local rec = { S(more) .. head }
  for c = 1, nc do
    rec[2 * c] = ids[c]
    rec[2 * c + 1] = out[c][4]
  end
  redis.call('RPUSH', K_REQUEST, unpack(rec))
  redis.call('PEXPIRE', K_REQUEST, S(recordLife(used)))
end
return { out, more }
