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
