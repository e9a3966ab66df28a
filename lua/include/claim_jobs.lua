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
