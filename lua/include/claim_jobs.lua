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
