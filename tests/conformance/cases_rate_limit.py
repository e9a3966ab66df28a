"""Rate limits: meta `rate_limit` (`<max>/<ms>`) caps the claims of claim and settle_claim
across every worker to max per sliding window of ms on the Redis clock, logged in
P:{T}:rate; a call with no slot left answers more = -(ms until the next slot opens).
meta `rate_limit_per_key` caps the claims of the jobs enqueued with the option `rate_key`
per key (P:{T}:rate:key:<key>): a job over its key's limit is set aside to delayed until
its key's next slot (status delayed, no attempt charged) and the call goes on.
"""
from jq import *


def enqueue_keyed(q, jobs, key):
    args = []
    for j in jobs:
        args += list(j)
    return q.ev('enqueue', [q.jk(j[0]) for j in jobs], len(jobs), *args, 'options',
                'rate_key', key)


@test
def a_queue_limit_cuts_a_batch_and_answers_the_wait():
    q = fresh('rate1')
    q.enqueue([(f'j{i}', 'p', 0) for i in range(10)])
    r.hset(q.meta, 'rate_limit', '3/60000')
    t0 = now_ms()
    jobs, more = q.claim_reply(5)
    assert [j[0] for j in jobs] == [b'j0', b'j1', b'j2']
    assert -60000 <= more < -59000, more
    # the log holds the 3 claims, and lives one window
    assert r.zcard(q.p + 'rate') == 3
    assert 0 < r.pttl(q.p + 'rate') <= 60000
    # no slot left: nothing leased, nothing promoted, the wait again; counted
    snap_pending = r.llen(q.pending)
    jobs, more = q.claim_reply(2)
    assert jobs == [] and more < 0 and -more <= 60000 - (now_ms() - t0) + 5
    assert r.llen(q.pending) == snap_pending
    assert q.stats()['rate_limited'] == 1
    # settle_claim: the ack is applied, the claim part is limited the same way
    flat = q.settle_claim_flat(2, acks=[('j0', q.tok('j0'))])
    assert flat[0] < 0 and flat[2] == 1 and len(flat) == 3, flat


@test
def a_limit_raised_or_removed_applies_to_the_next_call():
    q = fresh('rate2')
    q.enqueue([(f'j{i}', 'p', 0) for i in range(10)])
    r.hset(q.meta, 'rate_limit', '2/60000')
    assert len(q.claim(5)) == 2
    r.hset(q.meta, 'rate_limit', '4/60000')
    jobs, more = q.claim_reply(5)
    assert len(jobs) == 2 and more < 0
    r.hdel(q.meta, 'rate_limit')
    jobs, more = q.claim_reply(5)
    assert len(jobs) == 5 and more == 0


@test
def a_window_that_passed_frees_its_slots():
    q = fresh('rate3')
    q.enqueue([(f'j{i}', 'p', 0) for i in range(4)])
    r.hset(q.meta, 'rate_limit', '2/30')
    assert len(q.claim(4)) == 2
    jobs, more = q.claim_reply(4)
    assert jobs == [] and -30 <= more < 0
    wait_ms(-more + 1)
    assert len(q.claim(4)) == 2


@test
def a_stored_limit_of_another_shape_is_no_limit():
    q = fresh('rate4')
    q.enqueue([(f'j{i}', 'p', 0) for i in range(5)])
    for v in ['0/1000', '5/0', 'abc', '1e3/1000', ' 2/1000']:
        r.hset(q.meta, 'rate_limit', v)
        jobs, more = q.claim_reply(1)
        assert len(jobs) == 1 and more == 0, (v, more)
    assert not r.exists(q.p + 'rate')


@test
def a_key_over_its_limit_is_set_aside_and_the_call_goes_on():
    q = fresh('ratek1')
    enqueue_keyed(q, [('a1', 'p', 0), ('a2', 'p', 0), ('a3', 'p', 0)], 'cust-42')
    q.enqueue([('b1', 'p', 0), ('b2', 'p', 0)])
    r.hset(q.meta, 'rate_limit_per_key', '1/60000')
    t0 = now_ms()
    jobs, more = q.claim_reply(3)
    assert [j[0] for j in jobs] == [b'a1', b'b1', b'b2'], jobs
    assert more == 0
    # a2 and a3 wait in delayed for the key's next slot, in their order, no attempt
    aside = r.zrange(q.delayed, 0, -1, withscores=True)
    assert [m for m, _ in aside] == [b'a2', b'a3']
    assert t0 + 60000 <= aside[0][1] < aside[1][1] <= now_ms() + 60001
    for id in ['a2', 'a3']:
        job = q.job(id)
        assert job['status'] == b'delayed' and 'attempts' not in job
        assert job['rate_key'] == b'cust-42'
    assert q.stats()['rate_deferred'] == 2
    assert r.zcard(q.p + 'rate:key:cust-42') == 1
    # due again while the key is still over its limit: set aside once more, not claimed
    r.zadd(q.delayed, {'a2': 1})
    assert q.claim(1) == []
    assert r.zscore(q.delayed, 'a2') >= t0 + 60000


@test
def the_rate_key_option_is_checked():
    q = fresh('ratek2')
    e = err_of(lambda: enqueue_keyed(q, [('a', 'p', 0)], ''))
    assert 'invalid rate_key: expected a key of 1..256 bytes, got ""' in e, e
    e = err_of(lambda: enqueue_keyed(q, [('a', 'p', 0)], 'k' * 257))
    assert 'invalid rate_key' in e, e
    assert not r.exists(q.jk('a'))
