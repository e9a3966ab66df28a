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
