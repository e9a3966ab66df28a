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
-- madeBy(token): the request id a lease's claim_token ends with, as settle_claim writes it
-- (<claimed_at>:<#worker>:<worker>:@<request>); nil when the token has no such layout
-- (a claim lease's token ends with its slot token, no `@`). Bounded: two plain finds
-- and a length check
local function madeBy(token)
  local a = string.find(token, ':', 1, true)
  if not a then return nil end
  local b = string.find(token, ':', a + 1, true)
  if not b or b - a < 2 or b - a > 6 then return nil end
  local len = string.sub(token, a + 1, b - 1)
  if not string.find(len, '^%d+$') then return nil end
  local at = b + 1 + tonumber(len)
  if string.sub(token, at, at + 1) ~= ':@' then return nil end
  local request = string.sub(token, at + 2)
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
-- record has no further use. Only a token holding `:@` can name one: a claim lease's
-- ends with its slot token, for which no record exists, and costs one plain find
local function forget(base, tokens)
  local dels = nil
  for token in pairs(tokens) do
    local request = string.find(token, ':@', 1, true) and madeBy(token)
    if request then
      dels = dels or {}
      dels[#dels + 1] = base .. request
    end
  end
  if dels then redis.call('DEL', unpack(dels)) end
end
