"""Job priorities (docs/protocol.md, Priorities): enqueue's `priority` option (0..9) puts a
ready job in its priority's list, P:{T}:pending:<p> (P:{T}:pending for 0); meta's
`priorities` names the lists that may hold ids; claim pops the highest first (strict) or
by a weighted round robin (meta's priority_mode `weighted`, priority p weighing 2^p); every
path that puts a job back in line puts it back in its own priority's list."""
from jq import *


def enq(q, jobs, priority=None):
    """jobs: (id, payload, delay_ms) triples, all of one priority (none: 0)."""
    args = [x for j in jobs for x in j]
    opts = ['options', 'priority', str(priority)] if priority is not None else []
    return q.ev('enqueue', [q.jk(j[0]) for j in jobs], len(jobs), *args, *opts)


def plist(q, p):
    return q.pending if p == 0 else f'{q.pending}:{p}'


def ids(jobs):
    return [j[0].decode() for j in jobs]


def manage(q, action, *rest):
    keys = [q.jk(rest[0])] if rest else []
    return q.ev('manage', keys, action, *rest)


@test
def a_priority_job_goes_to_its_list_and_meta_names_it():
    q = fresh('prio1')
    assert enq(q, [('a', 'pa', 0)], priority=5) == [1]
    assert enq(q, [('b', 'pb', 0)]) == [1]
    assert enq(q, [('c', 'pc', 0)], priority=0) == [1]
    assert r.lrange(plist(q, 5), 0, -1) == [b'a']
    assert r.lrange(q.pending, 0, -1) == [b'c', b'b']
    assert r.hget(q.jk('a'), 'priority') == b'5'
    assert r.hget(q.meta, 'priorities') == b'5'
    enq(q, [('d', 'pd', 0)], priority=9)
    enq(q, [('e', 'pe', 0)], priority=2)
    assert r.hget(q.meta, 'priorities') == b'952'
    s = q.stats()
    assert s['pending'] == 5 and s['pending:5'] == 1 and s['pending:9'] == 1 and s['pending:2'] == 1
    assert 'pending:1' not in s


@test
def strict_claims_take_the_highest_priority_first_fifo_within_each():
    q = fresh('prio2')
    enq(q, [(f'low{i}', 'x', 0) for i in range(50)])
    enq(q, [(f'mid{i}', 'x', 0) for i in range(5)], priority=3)
    enq(q, [(f'hi{i}', 'x', 0) for i in range(3)], priority=8)
    got = ids(q.claim(1)) + ids(q.claim(10)) + ids(q.claim(2))
    assert got == ['hi0', 'hi1', 'hi2', 'mid0', 'mid1', 'mid2', 'mid3', 'mid4', 'low0', 'low1',
                   'low2', 'low3', 'low4'], got
    # the lists found empty left meta's record
    assert r.hget(q.meta, 'priorities') == b''
    assert not r.exists(plist(q, 8)) and not r.exists(plist(q, 3))


@test
def a_stale_record_costs_an_empty_pop_and_is_dropped():
    q = fresh('prio3')
    enq(q, [('a', 'x', 0)])
    r.hset(q.meta, 'priorities', '74')
    assert ids(q.claim(5)) == ['a']
    assert r.hget(q.meta, 'priorities') == b''


@test
def weighted_mode_gives_each_priority_its_share():
    q = fresh('prio4')
    enq(q, [(f'low{i}', 'x', 0) for i in range(200)])
    enq(q, [(f'hi{i}', 'x', 0) for i in range(400)], priority=3)
    r.hset(q.meta, 'priority_mode', 'weighted')
    # weights 2^3 = 8 and 2^0 = 1: one claim in 9 takes priority 0
    got = []
    for _ in range(90):
        got += ids(q.claim(1))
    assert sum(1 for g in got if g.startswith('low')) == 10, got
    assert r.hget(q.meta, 'priority_turn') == b'90'
    # a batch takes the shares of its turns, highest first, then fills by priority
    batch = ids(q.claim(18))
    assert sum(1 for g in batch if g.startswith('low')) == 2, batch
    assert batch[:16] == [f'hi{i}' for i in range(80, 96)] and batch[16:] == ['low10', 'low11']
    # strict again: no low job while a high one waits
    r.hset(q.meta, 'priority_mode', 'strict')
    assert ids(q.claim(3)) == ['hi96', 'hi97', 'hi98']


@test
def retries_releases_and_reaps_return_a_job_to_its_priority():
    q = fresh('prio5')
    enq(q, [('a', 'x', 0), ('b', 'x', 0), ('c', 'x', 0)], priority=4)
    enq(q, [('z', 'x', 0)])
    ja, jb, jc = q.claim(3)
    assert q.fail('a', ja[3], 'boom', 'retry', 0) == b'pending'
    assert q.ev('fail', [q.jk('b')], 'b', jb[3], '', 'release', 0) == b'pending'
    assert r.lrange(plist(q, 4), 0, -1) == [b'a', b'b']  # a at the back, b at the front
    assert r.hget(q.meta, 'priorities') == b'4'
    # an expired lease goes back to the front of its own list
    r.zadd(q.processing, {'c': 1})
    r.hset(q.jk('c'), 'lease_until', 1)
    assert q.reap()[0] == 1
    assert r.lrange(plist(q, 4), 0, -1) == [b'a', b'b', b'c']
    assert r.lrange(q.pending, 0, -1) == [b'z']
    assert ids(q.claim(4)) == ['c', 'b', 'a', 'z']
    # settle_claim's fails too
    enq(q, [('d', 'x', 0)], priority=6)
    [jd] = q.claim(1)
    [jobs, _, _, outcomes] = q.settle_claim(1, fails=[('d', jd[3], 'boom', 'retry', 0)])
    assert outcomes == [b'pending'] and jobs == []
    assert r.lrange(plist(q, 6), 0, -1) == [b'd'] and r.hget(q.meta, 'priorities') == b'6'


@test
def delayed_jobs_are_promoted_to_their_priority():
    q = fresh('prio6')
    enq(q, [('low', 'x', 0)])
    enq(q, [('late', 'x', 1)], priority=7)
    enq(q, [('late2', 'x', 1)], priority=7)
    wait_ms(3)
    # claim's promotion: behind its own priority, ahead of priority 0
    assert ids(q.claim(1)) == ['late']
    assert r.lrange(plist(q, 7), 0, -1) == [b'late2']
    assert r.hget(q.meta, 'priorities') == b'7'
    assert ids(q.claim(5)) == ['late2', 'low']
    # reap's promotion
    enq(q, [('r', 'x', 1)], priority=2)
    wait_ms(3)
    assert q.reap_reply()[3] == 1
    assert r.lrange(plist(q, 2), 0, -1) == [b'r'] and r.hget(q.meta, 'priorities') == b'2'
    # a failed retry with a backoff comes back through delayed to its priority
    [j] = q.claim(1)
    assert q.fail('r', j[3], 'boom', 'retry', 1) == b'delayed'
    wait_ms(3)
    assert ids(q.claim(1)) == ['r']


@test
def redrive_run_delete_and_cancel_find_the_job_in_its_list():
    q = fresh('prio7')
    enq(q, [('a', 'x', 0)], priority=3)
    [j] = q.claim(1)
    assert q.fail('a', j[3], 'boom', 'dead', 0) == b'dead'
    assert q.redrive_ids(['a']) == 1
    assert r.lrange(plist(q, 3), 0, -1) == [b'a']
    assert manage(q, 'delete', 'a') == b'pending'
    assert not r.exists(plist(q, 3))
    enq(q, [('b', 'x', 0)], priority=3)
    assert manage(q, 'cancel', 'b') == b'pending'
    assert not r.exists(plist(q, 3)) and not r.exists(q.jk('b'))
    enq(q, [('c', 'x', 60000)], priority=9)
    enq(q, [('d', 'x', 0)], priority=9)
    assert manage(q, 'run', 'c') == 1
    assert r.lrange(plist(q, 9), 0, -1) == [b'd', b'c']  # c first in line
    # resume wakes one marker per job of every priority
    manage(q, 'pause')
    r.delete(q.wake)
    assert manage(q, 'resume') == 1
    assert r.llen(q.wake) == 2


@test
def stats_counts_every_priority_and_the_oldest_wait():
    q = fresh('prio8')
    enq(q, [('a', 'x', 0)], priority=1)
    wait_ms(20)
    enq(q, [('b', 'x', 0)], priority=9)
    s = q.stats()
    assert s['pending'] == 2 and s['pending:1'] == 1 and s['pending:9'] == 1
    assert s['oldest_pending_ms'] >= 20, s


@test
def without_priorities_claim_costs_what_it_did():
    q = fresh('prio9')
    enq(q, [('a', 'x', 0)])
    r.config_resetstat()
    q.claim(1, vis=1000)
    calls = sum(v['calls'] for k, v in r.info('commandstats').items()
                if k not in ('cmdstat_evalsha', 'cmdstat_config', 'cmdstat_info'))
    # TIME, LRANGE (record), HMGET meta (was HEXISTS), ZRANGEBYSCORE, RPOP, HGETALL,
    # HINCRBY, ZADD processing, HSET, LTRIM wake, ZADD workers, RPUSH and PEXPIRE record
    assert calls == 13, r.info('commandstats')


@test
def bad_priorities_are_refused_writing_nothing():
    q = fresh('prio10')
    for v, want in [('10', 'jobqueue: invalid priority: expected an integer 0..9, got "10"'),
                    ('-1', 'jobqueue: invalid priority: expected an integer 0..9, got "-1"'),
                    ('high', 'jobqueue: invalid priority: expected an integer 0..9, got "high"'),
                    ('05', 'jobqueue: invalid priority'), ('', 'jobqueue: invalid priority')]:
        snap = q.snapshot()
        args = ['j', 'p', 0, 'options', 'priority', v]
        m = err_of(lambda: q.ev('enqueue', [q.jk('j')], 1, *args))
        assert m.startswith(want), (v, m)
        assert q.snapshot() == snap, v


@test
def a_wrong_typed_priority_list_fails_the_call_and_changes_nothing():
    q = fresh('prio11')
    r.set(plist(q, 4), 'x')
    snap = q.snapshot()
    m = err_of(lambda: enq(q, [('a', 'x', 0)], priority=4))
    assert 'holds the wrong type' in m and plist(q, 4) in m, m
    assert q.snapshot() == snap
    # a claim that meets it undoes its pops
    r.delete(plist(q, 4))
    enq(q, [('b', 'x', 0)])
    r.set(plist(q, 4), 'x')
    r.hset(q.meta, 'priorities', '4')
    snap = q.snapshot()
    m = err_of(lambda: q.claim(2))
    assert 'holds the wrong type' in m, m
    assert q.snapshot() == snap


@test
def claim_reads_the_visibility_with_the_rest_of_meta():
    q = fresh('prio11')
    r.hset(q.meta, 'visibility_timeout_ms', '7000')
    enq(q, [('a', 'x', 0)])
    node = {'target_nodes': r.get_node_from_key(q.meta)} if CLUSTER else {}
    r.config_resetstat()
    jobs = q.claim(1, vis=0)
    stats = r.info('commandstats', **node)
    calls = sum(v['calls'] for k, v in stats.items()
                if k not in ('cmdstat_evalsha', 'cmdstat_config', 'cmdstat_info'))
    # the 13 commands of a claim given a visibility: visibility_timeout_ms comes with the
    # one HMGET of meta
    assert stats['cmdstat_hmget']['calls'] == 1 and calls == 13, stats
    claimed_at = int(jobs[0][3].split(b':')[0])
    assert jobs[0][4] == claimed_at + 7000, jobs
    assert r.zscore(q.processing, 'a') == jobs[0][4], jobs
