"""Per-attempt errors: fail, settle_claim's fails and reap's expired leases keep the error
of each of a job's last 5 failed attempts in error:1 .. error:5 (written in turn, `errors`
counting them), each `<attempt>:<at ms>:<text>`, the text cut to 1024 bytes."""
from jq import *


def kept(q, id):
    """The job's kept errors as (attempt, text), oldest first."""
    h = q.job(id)
    out = []
    for k in range(1, 6):
        v = h.get(f'error:{k}')
        if v is None:
            continue
        att, at, text = v.split(b':', 2)
        assert int(at) > 0
        out.append((int(at), int(att), text))
    return [(a, t) for _, a, t in sorted(out)]


@test
def fail_keeps_each_attempts_error_and_only_the_last_five():
    q = fresh('errs1')
    r.hset(q.meta, 'max_attempts', 10)
    q.enqueue([('a', 'p', 0)])
    for i in range(1, 8):
        [j] = q.claim(1)
        assert q.fail('a', j[3], f'boom {i}', 'retry', 0) == b'pending'
        wait_ms(1)
    assert q.job('a')['errors'] == b'7'
    assert kept(q, 'a') == [(i, f'boom {i}'.encode()) for i in range(3, 8)]
    assert q.job('a')['last_error'] == b'boom 7'


@test
def a_long_error_is_cut_and_release_records_none():
    q = fresh('errs2')
    q.enqueue([('a', 'p', 0)])
    [j] = q.claim(1)
    assert q.release_('a', j[3]) == b'pending'
    assert 'errors' not in q.job('a')
    [j] = q.claim(1)
    assert q.fail('a', j[3], 'x' * 5000, 'dead', 0) == b'dead'
    assert kept(q, 'a') == [(1, b'x' * 1024)]
    assert q.job('a')['last_error'] == b'x' * 5000  # last_error stays whole


@test
def settle_claim_and_reap_record_attempt_errors():
    q = fresh('errs3')
    r.hset(q.meta, 'max_attempts', 3)
    q.enqueue([('a', 'p', 0)])
    [j] = q.claim(1, vis=1)
    wait_ms(3)
    assert q.reap()[0] == 1  # the lease expired: requeued
    assert kept(q, 'a') == [(1, b'lease expired')]
    jobs, _, _, _ = q.settle_claim(1)
    assert q.settle_claim(1, fails=[('a', jobs[0][3], 'bad', 'retry', 0)])[3] == [b'pending']
    assert kept(q, 'a')[1] == (2, b'bad')
    # stored data read in bounded steps: a garbage `errors` counts as 0
    r.hset(q.jk('a'), 'errors', 'nonsense')
    jobs = q.claim(1)
    assert jobs and q.fail('a', jobs[0][3], 'last', 'retry', 0) == b'dead'
    assert q.job('a')['error:1'].split(b':', 2)[2] == b'last'
    assert q.job('a')['errors'] == b'1'
