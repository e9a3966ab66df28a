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
