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
