"""Priorities with the other per-job features: a debounced unique holder keeps its own
priority's list whatever the priority of the call that replaces it, and the per-key rate
limit sets a popped job aside after the priority-aware pop, the call going on with the
next priority (docs/protocol.md, Priorities, Unique keys, Rate limits)."""
from jq import *


def enq(q, jobs, priority=None, unique=None, rate_key=None):
    """jobs: (id, payload, delay_ms) triples; unique: (mode, key) for every job (one job)."""
    args = [x for j in jobs for x in j]
    if unique:
        args += ['unique', unique[0], 0, unique[1]]
    opts = []
    if priority is not None:
        opts += ['priority', str(priority)]
    if rate_key is not None:
        opts += ['rate_key', rate_key]
    if opts:
        args += ['options', *opts]
    return q.ev('enqueue', [q.jk(j[0]) for j in jobs], len(jobs), *args)


def plist(q, p):
    return q.pending if p == 0 else f'{q.pending}:{p}'


@test
def a_debounced_holder_made_ready_goes_to_its_own_priority():
    q = fresh('pmix1')
    assert enq(q, [('h', 'old', 60000)], priority=7, unique=('debounce', 'k')) == [1]
    # a later call of priority 0 replaces the waiting holder's payload, ready now
    assert enq(q, [('x', 'new', 0)], unique=('debounce', 'k')) == [[3, b'h']]
    assert r.lrange(plist(q, 7), 0, -1) == [b'h']
    assert r.llen(q.pending) == 0
    assert r.hget(q.meta, 'priorities') == b'7'
    assert q.job('h')['payload'] == b'new' and q.job('h')['priority'] == b'7'
    [j] = q.claim(1)
    assert j[0] == b'h' and j[1] == b'new'


@test
def a_debounced_ready_holder_leaves_its_own_priority_list_when_delayed_again():
    q = fresh('pmix2')
    assert enq(q, [('h', 'old', 0)], priority=5, unique=('debounce', 'k')) == [1]
    assert enq(q, [('x', 'new', 60000)], priority=2, unique=('debounce', 'k')) == [[3, b'h']]
    assert r.llen(plist(q, 5)) == 0 and r.llen(plist(q, 2)) == 0
    assert r.zscore(q.delayed, 'h') is not None
    assert q.job('h')['status'] == b'delayed'


@test
def a_key_over_its_limit_is_set_aside_after_the_priority_pop():
    q = fresh('pmix3')
    enq(q, [('a1', 'p', 0), ('a2', 'p', 0)], priority=9, rate_key='cust')
    enq(q, [('b1', 'p', 0)], priority=3)
    r.hset(q.meta, 'rate_limit_per_key', '1/60000')
    jobs, more = q.claim_reply(3)
    assert [j[0] for j in jobs] == [b'a1', b'b1'], jobs
    assert [m for m in r.zrange(q.delayed, 0, -1)] == [b'a2']
    assert q.job('a2')['status'] == b'delayed' and q.job('a2')['priority'] == b'9'
    # due again with its key's slot free: promoted to its own priority, claimed first
    r.delete(q.p + 'rate:key:cust')
    r.zadd(q.delayed, {'a2': 1})
    enq(q, [('c1', 'p', 0)])
    assert [j[0] for j in q.claim(2)] == [b'a2', b'c1']
