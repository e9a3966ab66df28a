"""Latency: enqueue records enqueued_at for jobs ready now, redrive restarts it, and stats
answers oldest_pending_ms (how long the oldest job ready to run has waited) and time (the
Redis clock of the reading)."""
from jq import *

MIN = 60000


def age(q):
    return q.stats()['oldest_pending_ms']


@test
def enqueue_records_when_a_ready_job_arrived():
    q = fresh('lat1')
    t0 = now_ms()
    assert q.enqueue([('a', 'pa', 0)]) == [1]
    t1 = now_ms()
    h = q.job('a')
    assert set(h) == {'payload', 'enqueued_at'} and t0 <= int(h['enqueued_at']) <= t1, h


@test
def stats_answers_the_age_of_the_next_pending_job_and_its_clock():
    q = fresh('lat2')
    t0 = now_ms()
    st = q.stats()
    assert st['oldest_pending_ms'] == 0, st              # nothing waits
    assert t0 <= st['time'] <= now_ms(), st
    q.enqueue([('a', 'p', 0)])
    q.enqueue([('b', 'p', 0)])
    # a arrived five minutes ago; b, behind it in line, just now
    r.hset(q.jk('a'), 'enqueued_at', now_ms() - 5 * MIN)
    assert 5 * MIN <= age(q) < 5 * MIN + 5000
    # once a is claimed, b is next: its age is its own
    q.claim(1)
    assert 0 <= age(q) < 5000
    # a job put back in line by a release waits since its last claim, not its enqueue
    q2 = fresh('lat2r')
    q2.enqueue([('c', 'p', 0)])
    r.hset(q2.jk('c'), 'enqueued_at', now_ms() - 60 * MIN)
    j = q2.claim(1)[0]
    tok = q2.restamp('c', now_ms() - 2 * MIN)
    assert q2.release_('c', tok) == b'pending'
    assert 2 * MIN <= age(q2) < 2 * MIN + 5000, age(q2)


@test
def a_due_delayed_job_waits_since_its_run_at():
    q = fresh('lat3')
    q.enqueue([('d', 'p', 3600000)])
    assert age(q) == 0                                   # delayed, not due: not waiting
    r.zadd(q.delayed, {'d': now_ms() - 7000})            # due seven seconds ago
    assert 7000 <= age(q) < 12000
    # the larger of the pending job's age and the due job's
    q.enqueue([('p', 'p', 0)])
    assert 7000 <= age(q) < 12000
    r.hset(q.jk('p'), 'enqueued_at', now_ms() - 9 * MIN)
    assert 9 * MIN <= age(q) < 9 * MIN + 5000


@test
def redrive_restarts_the_wait():
    q = fresh('lat4')
    q.enqueue([('x', 'p', 0)])
    j = q.claim(1)[0]
    assert q.fail('x', j[3], mode='dead') == b'dead'
    # it died an hour ago and was enqueued a day ago; redriven now, it waits from now
    r.hset(q.jk('x'), mapping={'enqueued_at': now_ms() - 24 * 60 * MIN,
                               'died_at': now_ms() - 60 * MIN})
    t0 = now_ms()
    assert q.redrive_ids(['x']) == 1
    assert t0 <= int(q.job('x')['enqueued_at']) <= now_ms()
    assert 0 <= age(q) < 5000


@test
def an_unknown_age_is_minus_one():
    q = fresh('lat5')
    # a job enqueued ready by an earlier release: only its payload
    r.hset(q.jk('old'), 'payload', 'p')
    r.lpush(q.pending, 'old')
    assert age(q) == -1
    # hostile stored times are not read as times
    for bad in ['inf', '-1', '1e400', 'nan', '9' * 400, '0x10', '', '1.5']:
        r.hset(q.jk('old'), 'enqueued_at', bad)
        assert age(q) == -1, bad
    r.hset(q.jk('old'), 'claim_token', b'9' * 400 + b':1:w:t')
    assert age(q) == -1
    # the next pending id has no hash, or a key of another type
    q2 = fresh('lat5b')
    r.lpush(q2.pending, 'gone')
    assert age(q2) == -1
    r.set(q2.jk('gone'), 'x')
    assert age(q2) == -1
    # without the job-key prefix (ARGV empty) the hash cannot be read
    q3 = fresh('lat5c')
    q3.enqueue([('a', 'p', 0)])
    a = r.evalsha(SHAS['stats'], 8, *q3.K, q3.orphans)
    st = {a[i].decode(): a[i + 1] for i in range(0, len(a), 2)}
    assert st['oldest_pending_ms'] == -1 and st['pending'] == 1, st
    # a delayed score that is no time is not read as one
    q4 = fresh('lat5d')
    r.zadd(q4.delayed, {'z': float('-inf')})
    assert age(q4) == 0
