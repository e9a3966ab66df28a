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
