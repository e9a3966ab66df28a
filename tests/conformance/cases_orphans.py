"""Orphans: set-aside ids restored with the job's own time, purged ids whose hash comes
back, reap's `more` after a restore, hashes without `status`, wrong-typed job keys."""
from jq import *

HOUR = 3600000
DAY = 86400000


def away(q, id):
    """A slot migration: the job hash is elsewhere for a while."""
    r.rename(q.jk(id), 'away:' + q.p + id)


def back(q, id):
    r.rename('away:' + q.p + id, q.jk(id))


@test
def orphan_restore_keeps_the_jobs_own_time():
    q = fresh('o7')
    # a job delayed an hour, set aside (its hash was elsewhere) and then back
    q.enqueue([('d', 'p', HOUR)])
    run_at = r.zscore(q.delayed, 'd')
    away(q, 'd')
    r.zrem(q.delayed, 'd')
    r.zadd(q.orphans, {'d': now_ms() - 5000})    # set aside five seconds ago
    back(q, 'd')
    assert q.reap_reply()[4] == 1
    assert r.zscore(q.delayed, 'd') == run_at, r.zscore(q.delayed, 'd')
    assert q.claim(1) == [] and r.llen(q.pending) == 0   # still delayed: nothing to run
    assert int(q.job('d')['run_at']) == run_at           # the hash keeps its time
    # a job dead for a moment keeps its retention
    r.hset(q.meta, mapping={'dead_retention_ms': 60000, 'max_attempts': 1})
    q.enqueue([('x', 'p', 0)])
    tok = q.claim(1)[0][3]
    assert q.fail('x', tok) is not None
    died_at = r.zscore(q.dead, 'x')
    assert q.job('x')['status'] == b'dead'
    away(q, 'x')
    r.zrem(q.dead, 'x')
    r.zadd(q.orphans, {'x': died_at - 120000})  # set aside two minutes before it died
    back(q, 'x')
    assert q.reap_reply()[4] == 1
    assert r.zscore(q.dead, 'x') == died_at
    q.reap()
    assert r.zscore(q.dead, 'x') == died_at and r.exists(q.jk('x')), 'trimmed within retention'
    assert int(q.job('x')['died_at']) == died_at
    # a job failed with a backoff and dead-lettered by reap carry their times too
    r.hset(q.meta, 'max_attempts', 5)
    q.enqueue([('y', 'p', 0)])
    tok = q.claim(1)[0][3]
    q.fail('y', tok, 'boom', 'retry', HOUR)
    assert int(q.job('y')['run_at']) == r.zscore(q.delayed, 'y')
    r.hset(q.meta, 'max_attempts', 1)
    q.enqueue([('z', 'p', 0)])
    q.claim(1, vis=1)
    wait_ms(3)
    assert q.reap()[1] == 1
    assert int(q.job('z')['died_at']) == r.zscore(q.dead, 'z')
    # an entry already in its set is left as it is (ZADD NX)
    r.zadd(q.orphans, {'y': now_ms()})
    r.zadd(q.delayed, {'y': now_ms() + 2 * HOUR})
    before = r.zscore(q.delayed, 'y')
    q.reap_reply()
    assert r.zscore(q.delayed, 'y') == before and r.zscore(q.orphans, 'y') is None
    # a hash without its time field (an earlier release) is restored as due
    away(q, 'd'); r.zrem(q.delayed, 'd'); r.zadd(q.orphans, {'d': now_ms()})
    back(q, 'd'); r.hdel(q.jk('d'), 'run_at')
    t0 = now_ms()
    assert q.reap_reply()[4] == 1 and t0 - 10000 <= r.zscore(q.delayed, 'd') <= now_ms()


@test
def a_purged_orphan_whose_hash_comes_back_runs():
    q = fresh('o8')
    q.enqueue([('g', 'pay', 0), ('h', 'p', 0)])
    away(q, 'g')
    assert [j[0] for j in q.claim(2)] == [b'h']
    assert r.zscore(q.orphans, 'g') is not None
    t0 = now_ms()
    assert q.purge_orphans(10) == 1
    st = q.stats(); assert st['orphaned'] == 0 and st['orphans_purged'] == 1, st
    assert q.purge_orphans(10) == 0               # not purged twice
    assert q.reap_reply()[4] == 0
    # the hash comes back: reap restores it and it runs
    back(q, 'g')
    res = q.reap_reply()
    assert res[4] == 1 and r.zscore(q.orphans, 'g') is None, res
    st = q.stats(); assert st['restored'] == 1 and st['restored_purged'] == 1, st
    jobs = q.claim(1)
    assert [(j[0], j[1]) for j in jobs] == [(b'g', b'pay')]
    assert q.ack([('g', jobs[0][3])]) == [1] and not r.exists(q.jk('g'))
    assert q.enqueue([('g', 'again', 0)]) == [1]  # the id is free again
    # purge remembers what it forgot: a negative score, minus the time it was purged
    q.enqueue([('k', 'p', 0)]); away(q, 'k'); q.claim(2)
    t0 = now_ms()
    assert q.purge_orphans(10) == 1
    assert -now_ms() <= r.zscore(q.orphans, 'k') <= -t0 and q.stats()['orphaned'] == 0
    # a purged id whose hash never comes back is forgotten for good after 7 days
    r.zadd(q.orphans, {'old': -(now_ms() - 7 * DAY - 1000), 'young': -(now_ms() - DAY)})
    q.reap_reply()
    assert r.zscore(q.orphans, 'old') is None and r.zscore(q.orphans, 'young') is not None
    # set aside again while remembered as purged: set aside anew, scored now
    r.lpush(q.pending, 'young')
    t1 = now_ms()
    q.claim(1)
    assert r.zscore(q.orphans, 'young') >= t1 and q.stats()['orphaned'] == 1
    # purge takes the set-aside ids only, oldest first, never the purged ones
    p2 = -(now_ms() - 1000)
    r.zadd(q.orphans, {'p1': now_ms() - 2000, 'p2': p2})
    assert q.purge_orphans(1) == 1 and r.zscore(q.orphans, 'p1') < 0
    assert r.zscore(q.orphans, 'young') > 0 and r.zscore(q.orphans, 'p2') == p2


@test
def reap_says_more_after_restoring_due_entries():
    q = fresh('o11a')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    q.claim(1, vis=1)
    away(q, 'a')
    wait_ms(3)
    assert q.reap_reply()[:3] == [0, 0, 0] and r.zscore(q.orphans, 'a') is not None
    back(q, 'a')
    # restored into processing with its expired lease: more
    res = q.reap_reply()
    assert res[4] == 1 and res[2] == 1, res
    assert q.reap_reply()[:3] == [1, 0, 0]
    # restored into delayed with a run_at that is due: more
    q2 = fresh('o11a2')
    q2.enqueue([('d', 'p', 1)])
    wait_ms(3)
    away(q2, 'd')
    r.zrem(q2.delayed, 'd'); r.zadd(q2.orphans, {'d': now_ms()})
    back(q2, 'd')
    res = q2.reap_reply()
    assert res[4] == 1 and res[2] == 1, res
    assert q2.reap_reply()[3] == 1 and r.lrange(q2.pending, 0, -1) == [b'd']
    # restored into delayed, not due: no more
    q2.enqueue([('e', 'p', HOUR)])
    r.zrem(q2.delayed, 'e'); r.zadd(q2.orphans, {'e': now_ms()})
    res = q2.reap_reply()
    assert res[4] == 1 and res[2] == 0, res


@test
def a_hash_without_status_is_a_pending_job_not_an_absent_one():
    q = fresh('o11b')
    q.enqueue([('a', 'p', 0)])                   # ready: the hash holds its payload only
    assert 'status' not in q.job('a')
    # a stray entry of a in processing: dropped (the hash says pending), not set aside
    r.zadd(q.processing, {'a': 0})
    q.reap_reply()
    assert r.zcard(q.processing) == 0 and r.zcard(q.orphans) == 0, r.zrange(q.orphans, 0, -1)
    st = q.stats(); assert st['orphans'] == 1 and st.get('set_aside', 0) == 0, st
    q.reap_reply()
    assert r.lrange(q.pending, 0, -1) == [b'a']  # once
    # a stray due entry in delayed: dropped by claim as well
    r.zadd(q.delayed, {'a': 0})
    jobs = q.claim(2)
    assert [j[0] for j in jobs] == [b'a'] and r.zcard(q.orphans) == 0
    assert r.llen(q.pending) == 0 and r.zcard(q.delayed) == 0
    q.reap_reply()
    assert r.llen(q.pending) == 0 and r.zcard(q.orphans) == 0
    # ... and by reap's promotion and dead trimming
    q.enqueue([('b', 'p', 0), ('c', 'p', 0)])
    r.zadd(q.delayed, {'b': 0}); r.zadd(q.dead, {'c': 0})
    r.hset(q.meta, 'dead_retention_ms', 1)
    q.reap_reply()
    assert r.zcard(q.orphans) == 0 and r.zcard(q.delayed) == 0 and r.zcard(q.dead) == 0
    assert sorted(r.lrange(q.pending, 0, -1)) == [b'b', b'c']
    # a hash without status and without payload is pending too (empty payload)
    r.delete(q.pending)
    r.hset(q.jk('e'), 'enqueued_at', '1')
    r.lpush(q.pending, 'e')
    assert [(j[0], j[1]) for j in q.claim(1)] == [(b'e', b'')]
    assert r.zcard(q.orphans) == 0


@test
def a_wrong_typed_job_key_is_set_aside_and_the_queue_flows():
    q = fresh('o12')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 0)])
    r.delete(q.jk('a')); r.set(q.jk('a'), 'not a hash')
    jobs, more = q.claim_reply(2)
    assert [j[0] for j in jobs] == [b'b', b'c'] and more == 0
    assert r.zscore(q.orphans, 'a') is not None and r.get(q.jk('a')) == b'not a hash'
    st = q.stats()
    assert st['wrong_type'] == 1 and st['set_aside'] == 1 and st['orphaned'] == 1, st
    # reap keeps it set aside (and counts it once), and still does its work
    q.enqueue([('d', 'p', 0)])
    q.claim(1, vis=1); wait_ms(3)
    assert q.reap_reply()[:2] == [1, 0] and r.zscore(q.orphans, 'a') is not None
    assert q.stats()['wrong_type'] == 1
    # in delayed, processing and dead: set aside by claim and reap alike
    r.set(q.jk('w1'), 'x'); r.zadd(q.delayed, {'w1': 0})
    r.sadd(q.jk('w2'), 'x'); r.zadd(q.processing, {'w2': 0})
    r.rpush(q.jk('w3'), 'x'); r.zadd(q.dead, {'w3': 0})
    r.hset(q.meta, 'dead_retention_ms', 1)
    assert [j[0] for j in q.claim(1)] == [b'd']
    q.reap_reply()
    assert r.zcard(q.delayed) == 0 and r.zscore(q.processing, 'w2') is None and r.zcard(q.dead) == 0
    assert sorted(r.zrange(q.orphans, 0, -1)) == [b'a', b'w1', b'w2', b'w3']
    assert q.stats()['wrong_type'] == 4
    # settle_claim too
    q.enqueue([('s', 'p', 0)])
    r.set(q.jk('v'), 'x'); r.rpush(q.pending, 'v')
    jobs = q.settle_claim(2)[0]
    assert [j[0] for j in jobs] == [b's'] and r.zscore(q.orphans, 'v') is not None
    # the key is never touched; purge's orphans form forgets the id (no job hash)
    assert q.purge_orphans(10) == 5 and r.get(q.jk('a')) == b'not a hash'
    assert q.stats()['orphaned'] == 0
    # once the key is a job hash again, reap restores it
    r.delete(q.jk('a')); r.hset(q.jk('a'), 'payload', 'p')
    assert q.reap_reply()[4] == 1 and r.lrange(q.pending, 0, -1) == [b'a']
