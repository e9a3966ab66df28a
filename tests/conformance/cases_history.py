"""History: per-minute counts of enqueued / acked / failed / dead-lettered jobs in
P:{T}:hist:<kind>:<hour> (fields: the minute of the hour) and the acks' processing-time
buckets per 10 minutes in P:{T}:hist:h:<hour> (fields <slot>:<bucket>), each key expiring
25 hours after its hour began."""
from jq import *


def hist(q, kind, at):
    hour = at // 3600000
    return q.p + f'hist:{kind}:{hour}', hour


@test
def each_script_counts_its_jobs_in_the_minute_they_happened():
    q = fresh('hist1')
    r.hset(q.meta, 'max_attempts', 2)
    t0 = now_ms()
    q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 0), ('d', 'p', 5000)])
    ja, jb, jc = q.claim(3, vis=1)
    q.ack([(ja[0], ja[3])])
    q.fail('b', jb[3], 'boom', 'dead', 0)
    wait_ms(3)
    q.reap()  # c's lease expired: requeued (attempt 1 of 2), not dead
    [jc] = q.claim(1, vis=1)
    wait_ms(3)
    q.reap()  # c again: dead now
    q.enqueue([('e', 'p', 0)])
    [je] = q.claim(1)
    q.settle_claim(0 + 1, fails=[('e', je[3], 'x', 'dead', 0)])
    t1 = now_ms()
    totals = {}
    for kind in 'eafd':
        for hour in sorted({t0 // 3600000, t1 // 3600000}):
            key = q.p + f'hist:{kind}:{hour}'
            for field, v in r.hgetall(key).items():
                m = int(field)
                assert 0 <= m < 60
                minute = hour * 60 + m
                assert t0 // 60000 <= minute <= t1 // 60000, (kind, minute)
                totals[kind] = totals.get(kind, 0) + int(v)
            ttl_at = r.pexpiretime(key)
            if r.exists(key):
                assert ttl_at == (hour + 25) * 3600000, (key, ttl_at)
    assert totals == {'e': 5, 'a': 1, 'f': 2, 'd': 3}, totals
    # the ack's processing time, in its 10-minute slot
    key, hour = hist(q, 'h', t1)
    h = {k.decode(): int(v) for k, v in r.hgetall(key).items()}
    if not h:
        h = {k.decode(): int(v) for k, v in r.hgetall(hist(q, 'h', t0)[0]).items()}
    assert sum(h.values()) == 1 and all(k.split(':')[0] in '012345' for k in h), h


@test
def a_wrong_typed_history_key_never_fails_a_call():
    q = fresh('hist2')
    key, _ = hist(q, 'e', now_ms())
    r.set(key, 'x')
    assert q.enqueue([('a', 'p', 0)]) == [1]
    assert r.get(key) == b'x'
