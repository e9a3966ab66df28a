"""Conformance of lua/ to the protocol, checked by a client in another language.

Calls the scripts exactly as docs/protocol.md says (SCRIPT LOAD, EVALSHA, KEYS and ARGV
in protocol order) with redis-py only, on a private redis-server or a private 3-master
Redis Cluster (JOBQUEUE_CONFORMANCE_MODE, jq.py), and checks every rule:
FIFO, batches, duplicates, payload bytes, fencing by token, expiry, fail and backoff,
reap and trimming, redrive and purge, orphans, wake markers, wrong-typed keys (named,
nothing changed) and malformed arguments. Run by scripts/conformance.sh. The cases of newer areas live in cases_*.py beside this
file (each imports jq and registers its checks with @test); this file runs them all.
"""
import os, sys, traceback
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jq import *


@test
def fifo_and_batch():
    q = fresh('fifo')
    assert q.enqueue([('a', 'pa', 0), ('b', 'pb', 0), ('c', 'pc', 0)]) == [1, 1, 1]
    assert q.enqueue([('d', 'pd', 0)]) == [1]
    got = [q.claim(1)[0][0] for _ in range(2)]
    assert got == [b'a', b'b'], got
    res = q.claim(5)
    assert [j[0] for j in res] == [b'c', b'd'], res
    assert q.claim(3) == []
    st = q.stats()
    assert st['enqueued'] == 4 and st['claimed'] == 4 and st['processing'] == 4, st
    assert r.llen(q.wake) == 0  # the claim that found pending short emptied wake

@test
def claim_shape_and_fields():
    q = fresh('shape')
    q.enqueue([('x', 'payload', 0)])
    t0 = now_ms()
    job = q.claim(1, worker='wk-7', vis=5000, tokens=['tok1'])[0]
    t1 = now_ms()
    assert job[0] == b'x' and job[1] == b'payload' and job[2] == 1
    assert isinstance(job[2], int) and isinstance(job[4], int)
    assert t0 + 5000 <= job[4] <= t1 + 5000
    h = q.job('x')
    # the lease's token: claimed_at, the worker (its length first) and the slot's token
    claimed_at, worker, token = parse_token(job[3])
    assert t0 <= claimed_at <= t1 and worker == b'wk-7' and token == b'tok1'
    assert job[3] == lease_token(claimed_at, 'wk-7', 'tok1')
    assert h['status'] == b'processing' and h['claim_token'] == job[3]
    assert int(h['lease_until']) == job[4] and int(h['attempts']) == 1
    assert 'claimed_at' not in h and 'worker' not in h
    assert t0 - 5000 <= int(h['enqueued_at']) <= t1  # enqueued ready: kept through the claim
    assert r.zscore(q.processing, 'x') == job[4]
    # meta visibility used when 0
    r.hset(q.meta, 'visibility_timeout_ms', 1234)
    q.enqueue([('y', '', 0)])
    t0 = now_ms(); job = q.claim(1)[0]; t1 = now_ms()
    assert t0 + 1234 <= job[4] <= t1 + 1234
    r.delete(q.meta)
    q.enqueue([('z', '', 0)])
    t0 = now_ms(); job = q.claim(1)[0]; t1 = now_ms()
    assert t0 + 30000 <= job[4] <= t1 + 30000

@test
def duplicates():
    q = fresh('dup')
    assert q.enqueue([('a', '1', 0), ('a', '2', 0), ('b', '3', 5000)]) == [1, 0, 1]
    snap = q.snapshot()
    assert q.enqueue([('a', 'x', 0), ('b', 'y', 0)]) == [0, 0]
    assert q.snapshot() == snap
    assert q.job('a')['payload'] == b'1'
    # processing job is still "there"
    j = q.claim(1)[0]
    assert q.enqueue([('a', 'z', 0)]) == [0]
    # after ack with retention 0 it's gone and can be re-enqueued
    assert q.ack([('a', j[3])]) == [1]
    assert q.enqueue([('a', 'again', 0)]) == [1]
    assert q.stats()['enqueued'] == 3

@test
def payloads():
    q = fresh('pay')
    binp = bytes(range(256)) * 3 + b'\x00\r\n'
    big = os.urandom(1 << 20)
    q.enqueue([('bin', binp, 0), ('empty', b'', 0), ('big', big, 0)])
    got = {j[0]: j[1] for j in q.claim(3)}
    assert got[b'bin'] == binp and got[b'empty'] == b'' and got[b'big'] == big
    # binary ids too
    bid = b'id\x00\xff\n'
    assert q.enqueue([(bid, b'\x01', 0)]) == [1]
    j = q.claim(1)[0]
    assert j[0] == bid and j[1] == b'\x01'
    assert q.ack([(bid, j[3])]) == [1]
    # delayed job with big payload promoted
    q.enqueue([('bigd', big, 1)])
    wait_ms(10)
    j = q.claim(1)[0]
    assert j[0] == b'bigd' and j[1] == big

@test
def ack_rules():
    q = fresh('ack')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 0)])
    js = q.claim(3)
    tok = {j[0].decode(): j[3] for j in js}
    assert q.ack([('a', 'wrong')]) == [0]
    assert q.ack([('a', tok['a']), ('a', tok['a']), ('zz', 'x'), ('b', tok['b'])]) == [1, 0, 0, 1]
    assert not r.exists(q.jk('a')) and r.zscore(q.processing, 'a') is None
    st = q.stats()
    # 'zz' has no job hash: unknown, not stale
    assert st['acked'] == 2 and st['stale'] == 2 and st['unknown'] == 1, st
    assert sum(v for k, v in st.items() if k.startswith('h:')) == 2
    # stale ack only counts stale
    snap = q.snapshot()
    assert q.ack([('c', 'wrong')]) == [0]
    snap2 = q.snapshot()
    diff = [k for k in set(snap) | set(snap2) if snap.get(k) != snap2.get(k)]
    assert diff == [q.stats_key.encode()], diff
    # histogram buckets
    n = now_ms()
    assert q.ack([('c', q.restamp('c', n - 1500))]) == [1]
    assert q.stats().get('h:10') == 1
    for off, b in [(-5000, 0), (100, 6), (1024, 10), (1500, 10), (5000, 12), (70000, 16)]:
        q.enqueue([('h', 'p', 0)]); j = q.claim(1)[0]
        t = q.restamp('h', now_ms() - off)
        before = q.stats().get(f'h:{b}', 0)
        assert q.ack([('h', t)]) == [1]
        assert q.stats().get(f'h:{b}', 0) == before + 1, (off, b, q.stats())

@test
def unknown_ids_are_not_stale():
    # an ack or extend for an id with no job hash (a typo, or a job finished and deleted)
    # counts `unknown`; one for a job that exists under another lease counts `stale`
    q = fresh('unk')
    q.enqueue([('a', 'p', 0)])
    t = q.claim(1)[0][3]
    snap = q.snapshot()
    assert q.ack([('typo', t)]) == [0]
    assert q.extend(1000, [('typo', t), ('other', t)]) == [0, 0]
    snap2 = q.snapshot()
    diff = [k for k in set(snap) | set(snap2) if snap.get(k) != snap2.get(k)]
    assert diff == [q.stats_key.encode()], diff
    st = q.stats()
    assert st['unknown'] == 3 and st.get('stale', 0) == 0, st
    assert q.ack([('a', 'wrong')]) == [0]
    assert q.extend(1000, [('a', 'wrong')]) == [0]
    st = q.stats()
    assert st['unknown'] == 3 and st['stale'] == 2, st
    # a wrong-typed stats key is still named when the only change is `unknown`
    r.delete(q.stats_key); r.set(q.stats_key, 'x')
    assert 'holds the wrong type' in err_of(lambda: q.ack([('typo', t)]))
    assert 'holds the wrong type' in err_of(lambda: q.extend(1000, [('typo', t)]))
    assert r.get(q.stats_key) == b'x'

@test
def enqueue_refuses_a_job_key_that_is_not_prefix_and_id():
    q = fresh('ekey')
    before = q.snapshot()
    e = err_of(lambda: q.ev('enqueue', [q.jk('a'), q.jk('x')], 2, 'a', 'p', 0, 'b', 'p', 0))
    assert e.startswith('jobqueue: invalid keys: triple 2'), e
    assert q.jp + 'x' in e and 'b' in e, e
    # another key of the queue's slot (a Cluster refuses one of another slot itself)
    other = 'other:' + q.p + 'job:a'
    e = err_of(lambda: q.ev('enqueue', [other], 1, 'a', 'p', 0))
    assert e.startswith('jobqueue: invalid keys: triple 1'), e
    assert q.snapshot() == before
    assert not r.exists(q.jk('x')) and not r.exists(other)
    # the right keys still work, binary ids included
    assert q.enqueue([('a', 'p', 0), (b'\xff b', 'p', 5)]) == [1, 1]

@test
def log2_exact():
    src = open(os.path.join(LUA, 'ack.lua')).read()
    i = src.index('local function log2floor'); j = src.index('-- arguments')
    k = src.index('local MAXMS')
    fn = src[k:src.index('\n', k) + 1] + src[i:j]
    vals = [-3, 0, 1, 2, 3, 4, 7, 8, 1023, 1024, 1025, 2**20 - 1, 2**20, 2**31 - 1, 2**31, 2**40, 2**40 - 1, 2**45 + 7]
    got = r.eval(fn + 'local o = {} for i = 1, #ARGV do o[i] = log2floor(tonumber(ARGV[i])) end return o', 0, *vals)
    import math
    want = [max(v, 1).bit_length() - 1 for v in vals]
    assert got == want, (got, want)

@test
def completed_retention():
    q = fresh('ret')
    r.hset(q.meta, 'completed_retention_ms', 60000)
    q.enqueue([('a', 'p', 0)])
    j = q.claim(1, worker='W')[0]
    assert q.ack([('a', j[3])]) == [1]
    h = q.job('a')
    # the lease is gone; its token stays, saying when and by whom it was claimed
    assert h['status'] == b'done' and h['claim_token'] == j[3] and 'lease_until' not in h
    assert parse_token(h['claim_token'])[1] == b'W'
    assert 0 < r.pttl(q.jk('a')) <= 60000
    assert q.enqueue([('a', 'p', 0)]) == [0]
    assert q.ack([('a', j[3])]) == [0]

@test
def extend_rules():
    q = fresh('ext')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    js = q.claim(2, vis=1000)
    t = {j[0].decode(): j[3] for j in js}
    t0 = now_ms()
    res = q.extend(60000, [('a', t['a']), ('b', 'bad'), ('a', t['a'])])
    t1 = now_ms()
    assert res[1] == 0 and res[0] == res[2] and t0 + 60000 <= res[0] <= t1 + 60000
    assert r.zscore(q.processing, 'a') == res[0] and int(q.job('a')['lease_until']) == res[0]
    assert q.stats()['stale'] == 1
    r.hset(q.meta, 'visibility_timeout_ms', 7777)
    t0 = now_ms(); res = q.extend(0, [('b', t['b'])]); t1 = now_ms()
    assert t0 + 7777 <= res[0] <= t1 + 7777
    assert q.extend(1000, [('nope', 'x')]) == [0]
    st = q.stats()
    assert st['stale'] == 1 and st['unknown'] == 1, st

@test
def expired_unreaped_accepted():
    q = fresh('exp')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 0)])
    js = {j[0].decode(): j[3] for j in q.claim(3, vis=1)}
    wait_ms(10)
    assert q.stats()['expired'] == 3
    assert q.ack([('a', js['a'])]) == [1]
    assert q.extend(10000, [('b', js['b'])])[0] > 0
    assert q.fail('c', js['c'], 'e', 'dead', -1) == b'dead'
    assert q.reap() == [0, 0, 0]

@test
def late_ack_after_reap():
    q = fresh('late')
    q.enqueue([('a', 'p', 0)])
    j = q.claim(1, vis=1)[0]
    wait_ms(10)
    assert q.reap() == [1, 0, 0]
    h = q.job('a')
    assert h['status'] == b'pending' and h['claim_token'] == j[3] and 'lease_until' not in h
    assert parse_token(h['claim_token'])[1] == b'w1'
    assert q.ack([('a', j[3])]) == [0]
    assert q.extend(1000, [('a', j[3])]) == [0]
    assert q.fail('a', j[3]) == b'stale'
    st = q.stats()
    assert st['stale'] == 3 and st['reaped'] == 1
    j2 = q.claim(1)[0]
    assert j2[0] == b'a' and j2[2] == 2
    # reclaimed: the old token still rejected
    assert q.ack([('a', j[3])]) == [0]
    assert q.ack([('a', j2[3])]) == [1]

@test
def fail_rules():
    q = fresh('fail')
    r.hset(q.meta, mapping={'backoff_initial_ms': 40, 'backoff_multiplier': 1.5, 'backoff_max_ms': 100000, 'max_attempts': 4})
    q.enqueue([('a', 'p', 0)])
    j = q.claim(1)[0]
    t0 = now_ms(); assert q.fail('a', j[3], 'e1') == b'delayed'; t1 = now_ms()
    h = q.job('a')
    assert h['status'] == b'delayed' and h['last_error'] == b'e1' and h['claim_token'] == j[3] and 'lease_until' not in h
    sc = r.zscore(q.delayed, 'a')
    assert t0 + 40 <= sc <= t1 + 40
    assert r.zscore(q.processing, 'a') is None
    assert q.claim(1) == []
    wait_ms(60)
    j = q.claim(1)[0]
    assert j[0] == b'a' and j[2] == 2 and r.zcard(q.delayed) == 0
    t0 = now_ms(); assert q.fail('a', j[3], 'e2') == b'delayed'; t1 = now_ms()
    sc = r.zscore(q.delayed, 'a')
    assert t0 + 60 <= sc <= t1 + 60, (sc - t0)   # floor(40*1.5)
    r.zadd(q.delayed, {'a': 0})
    j = q.claim(1)[0]; assert j[2] == 3
    t0 = now_ms(); q.fail('a', j[3], 'e3'); t1 = now_ms()
    sc = r.zscore(q.delayed, 'a')
    assert t0 + 90 <= sc <= t1 + 90, (sc - t0)   # floor(40*2.25)
    r.zadd(q.delayed, {'a': 0})
    j = q.claim(1)[0]; assert j[2] == 4
    assert q.fail('a', j[3], 'final') == b'dead'
    h = q.job('a')
    assert h['status'] == b'dead' and h['last_error'] == b'final' and r.zscore(q.dead, 'a') is not None
    st = q.stats()
    assert st['failed'] == 4 and st['retried'] == 3 and st['dead_lettered'] == 1, st
    # explicit backoff and 0
    q.enqueue([('b', 'p', 0)])
    j = q.claim(1)[0]
    t0 = now_ms(); assert q.fail('b', j[3], 'x', 'retry', 5000) == b'delayed'; t1 = now_ms()
    assert t0 + 5000 <= r.zscore(q.delayed, 'b') <= t1 + 5000
    r.zadd(q.delayed, {'b': 0}); j = q.claim(1)[0]
    wl = r.llen(q.wake)
    assert q.fail('b', j[3], 'x', 'retry', 0) == b'pending'
    assert r.llen(q.wake) == wl + 1 and q.job('b')['status'] == b'pending' and r.lrange(q.pending, 0, -1) == [b'b']
    j = q.claim(1)[0]
    assert q.fail('b', j[3], 'gone', 'dead', 0) == b'dead'
    # cap
    r.hset(q.meta, mapping={'backoff_max_ms': 70, 'backoff_multiplier': 10})
    q.enqueue([('c', 'p', 0)]); j = q.claim(1)[0]
    r.hset(q.jk('c'), 'attempts', 3)
    t0 = now_ms(); q.fail('c', j[3]); t1 = now_ms()
    assert t0 + 70 <= r.zscore(q.delayed, 'c') <= t1 + 70
    # max_attempts below 1 -> 1
    r.hset(q.meta, 'max_attempts', 0)
    r.zadd(q.delayed, {'c': 0}); j = q.claim(1)[0]
    assert q.fail('c', j[3]) == b'dead'
    r.hset(q.meta, 'max_attempts', -3)
    q.enqueue([('d', 'p', 0)]); j = q.claim(1)[0]
    assert q.fail('d', j[3]) == b'dead'
    # defaults: max 5, initial 1000
    r.delete(q.meta)
    q.enqueue([('e', 'p', 0)]); j = q.claim(1)[0]
    t0 = now_ms(); q.fail('e', j[3]); t1 = now_ms()
    assert t0 + 1000 <= r.zscore(q.delayed, 'e') <= t1 + 1000
    r.hset(q.jk('e'), 'attempts', 4)
    r.zadd(q.delayed, {'e': 0}); j = q.claim(1)[0]
    assert j[2] == 5 and q.fail('e', j[3]) == b'dead'

@test
def release_rules():
    q = fresh('release')
    r.hset(q.meta, 'max_attempts', 1)
    q.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    j = q.claim(1)[0]
    assert j[0] == b'a' and j[2] == 1
    r.hset(q.jk('a'), 'last_error', 'earlier')
    wl = r.llen(q.wake)
    assert q.release_('a', j[3]) == b'pending'
    h = q.job('a')
    # back at the front, the attempt given back, the lease gone, last_error untouched
    assert h['status'] == b'pending' and h['attempts'] == b'0', h
    assert h['claim_token'] == j[3] and 'lease_until' not in h and h['last_error'] == b'earlier'
    assert r.lrange(q.pending, 0, -1) == [b'b', b'a'] and r.zscore(q.processing, 'a') is None
    assert r.llen(q.wake) == wl + 1
    st = q.stats()
    assert st['released'] == 1 and 'failed' not in st and 'retried' not in st, st
    # on its last attempt, a released job is claimed again instead of dead-lettered
    j = q.claim(1)[0]
    assert j[0] == b'a' and j[2] == 1
    # a stale release changes nothing
    assert q.release_('a', 'not-the-token') == b'stale'
    assert q.job('a')['attempts'] == b'1' and q.stats()['stale'] == 1
    assert q.release_('a', j[3]) == b'pending'
    # attempts never drop below 0
    r.hset(q.jk('b'), 'attempts', 0)
    q.claim(1)  # takes a again (front)
    jb = q.claim(1)[0]
    r.hset(q.jk('b'), 'attempts', 0)
    assert q.release_('b', jb[3]) == b'pending' and q.job('b')['attempts'] == b'0'

@test
def reap_rules():
    q = fresh('reap')
    q.enqueue([(f'j{i}', 'p', 0) for i in range(5)])
    js = q.claim(5, vis=1)
    wait_ms(10)
    q.enqueue([('later', 'p', 0)])
    wl = r.llen(q.wake)
    assert q.reap(2) == [2, 0, 1]
    assert q.reap(2) == [2, 0, 1]
    assert q.reap(2) == [1, 0, 0]
    assert r.llen(q.wake) == wl + 5
    # requeued jobs are served before 'later', earliest expired first
    order = [q.claim(1)[0][0] for _ in range(6)]
    assert order[-1] == b'later', order
    assert sorted(order[:5]) == [f'j{i}'.encode() for i in range(5)]
    assert q.stats()['reaped'] == 5
    # max attempts -> dead
    q2 = fresh('reap2')
    r.hset(q2.meta, 'max_attempts', 2)
    q2.enqueue([('a', 'p', 0)])
    q2.claim(1, vis=1); wait_ms(10); assert q2.reap() == [1, 0, 0]
    q2.claim(1, vis=1); wait_ms(10); assert q2.reap() == [0, 1, 0]
    h = q2.job('a')
    assert h['status'] == b'dead' and h['last_error'] == b'lease expired' and 'lease_until' not in h
    assert parse_token(h['claim_token'])[1] == b'w1'
    assert r.zscore(q2.dead, 'a') is not None and r.zcard(q2.processing) == 0
    st = q2.stats()
    assert st['dead_lettered'] == 1 and st['reaped'] == 1
    # re-scoring when the hash says not expired
    q3 = fresh('reap3')
    q3.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    q3.claim(2, vis=1)
    fut = now_ms() + 100000
    r.hset(q3.jk('a'), 'lease_until', fut)
    wait_ms(10)
    assert q3.reap(1) == [0, 0, 1]       # a re-scored; b still expired
    assert r.zscore(q3.processing, 'a') == fut
    assert q3.reap(5) == [1, 0, 0]
    # orphans in processing
    r.zadd(q3.processing, {'ghost': 1, 'a2': 2})
    r.hset(q3.jk('a2'), mapping={'status': 'done'})
    assert q3.reap(5) == [0, 0, 0]
    assert r.zscore(q3.processing, 'ghost') is None and q3.job('a2')['status'] == b'done'
    assert q3.stats()['orphans'] == 2
    # nothing to reap: no stats field appears
    q4 = fresh('reap4')
    st4 = q4.stats(); st4.pop('time')
    assert q4.reap(10) == [0, 0, 0] and st4 == {'pending': 0, 'processing': 0, 'expired': 0, 'delayed': 0, 'due': 0, 'dead': 0, 'orphaned': 0, 'oldest_pending_ms': 0}
    assert q4.snapshot() == {}

def make_dead(q, ids, err='e'):
    q.enqueue([(i, 'p', 0) for i in ids])
    for j in q.claim(len(ids)):
        assert q.fail(j[0], j[3], err, 'dead', 0) == b'dead'

@test
def dead_trimming():
    q = fresh('trim')
    make_dead(q, ['a', 'b', 'c'])
    wait_ms(3)
    make_dead(q, ['d', 'e'])
    r.hset(q.meta, 'dead_max_len', 3)
    assert q.reap() == [0, 0, 0]
    assert [x.decode() for x in r.zrange(q.dead, 0, -1)] == ['c', 'd', 'e']
    assert not r.exists(q.jk('a')) and not r.exists(q.jk('b')) and r.exists(q.jk('c'))
    assert q.stats()['dead_trimmed'] == 2
    # retention: the entries there died 5 s ago, f now (a retention of 1 ms raced the
    # reap's own call against f's death)
    r.hset(q.meta, mapping={'dead_max_len': 0, 'dead_retention_ms': 1000})
    r.zadd(q.dead, {m: s - 5000 for m, s in r.zrange(q.dead, 0, -1, withscores=True)}, xx=True)
    make_dead(q, ['f'])
    assert q.reap() == [0, 0, 0]
    assert [x.decode() for x in r.zrange(q.dead, 0, -1)] == ['f']
    assert q.stats()['dead_trimmed'] == 5
    # 0 = no limit
    r.hset(q.meta, mapping={'dead_max_len': 0, 'dead_retention_ms': 0})
    r.zadd(q.dead, {'old': 1})
    r.hset(q.jk('old'), mapping={'status': 'dead'})
    q.reap(); assert r.zcard(q.dead) == 2
    # defaults keep 7 days: entry at score 1 is trimmed with meta absent
    r.delete(q.meta)
    q.reap(); assert r.zcard(q.dead) == 1 and not r.exists(q.jk('old'))
    # bounded at 1000 per call
    qq = fresh('trim2')
    pipe = r.pipeline(transaction=False)
    n0 = now_ms()
    for i in range(1500):
        pipe.zadd(qq.dead, {f'x{i}': n0 - 10000 + i})
        pipe.hset(qq.jk(f'x{i}'), mapping={'status': 'dead', 'payload': 'p'})
    pipe.execute()
    r.hset(qq.meta, 'dead_max_len', 10)
    qq.reap()
    assert r.zcard(qq.dead) == 500, r.zcard(qq.dead)
    assert r.zrange(qq.dead, 0, 0) == [b'x1000']
    qq.reap(); assert r.zcard(qq.dead) == 10 and r.zrange(qq.dead, 0, 0) == [b'x1490']
    assert qq.stats()['dead_trimmed'] == 1490
    # orphans in dead: hash gone or not dead -> removed, counted as orphans, hash kept
    r.zadd(qq.dead, {'g1': 0, 'g2': 1})
    r.hset(qq.jk('g2'), 'status', 'pending')
    qq.reap()
    assert r.zscore(qq.dead, 'g1') is None and r.zscore(qq.dead, 'g2') is None and qq.job('g2')['status'] == b'pending'
    assert qq.stats()['orphans'] == 2
    # max len smaller than what one reap dead-letters: newest dead-lettered ones trimmed too
    q3 = fresh('trim3')
    r.hset(q3.meta, mapping={'dead_max_len': 1, 'max_attempts': 1})
    q3.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 0)])
    q3.claim(3, vis=1); wait_ms(10)
    assert q3.reap() == [0, 3, 0]
    assert r.zcard(q3.dead) == 1
    left = r.zrange(q3.dead, 0, -1)[0].decode()
    assert [r.exists(q3.jk(x)) for x in 'abc'].count(1) == 1 and r.exists(q3.jk(left))
    st = q3.stats(); assert st['dead_trimmed'] == 2 and st['dead_lettered'] == 3

@test
def redrive_purge():
    q = fresh('rp')
    make_dead(q, ['a', 'b', 'c', 'd', 'e'], err='bad')
    q.enqueue([('live', 'p', 0)])
    r.zadd(q.dead, {'ghost': 0})
    wl = r.llen(q.wake)
    assert q.redrive_ids(['a', 'live', 'nothing', 'a']) == 1
    h = q.job('a')
    assert h['status'] == b'pending' and h['attempts'] == b'0' and h['last_error'] == b'bad'
    assert r.llen(q.wake) == wl + 1 and r.zscore(q.dead, 'a') is None
    assert r.lrange(q.pending, 0, -1) == [b'a', b'live']
    assert q.redrive_oldest(2) == 1   # ghost (orphan) and b
    assert r.zscore(q.dead, 'ghost') is None
    st = q.stats(); assert st['redriven'] == 2 and st['orphans'] == 1, st
    j = q.claim(1)[0]; assert j[0] == b'live'
    j = q.claim(1)[0]; assert j[0] == b'a' and j[2] == 1
    assert q.purge_ids(['c', 'live', 'zzz']) == 1
    assert not r.exists(q.jk('c')) and r.exists(q.jk('live')) and r.zscore(q.dead, 'c') is None
    r.zadd(q.dead, {'ghost2': 0})
    assert q.purge_oldest(10) == 2   # d, e (+ ghost2 orphan)
    assert r.zcard(q.dead) == 0 and not r.exists(q.jk('d'))
    st = q.stats(); assert st['purged'] == 3 and st['orphans'] == 2, st
    assert q.redrive_oldest(5) == 0 and q.purge_oldest(5) == 0

@test
def claim_orphans_and_promotion():
    q = fresh('orph')
    q.enqueue([('a', 'p', 0)])
    r.rpush(q.pending, 'ghost', 'a-done')
    r.hset(q.jk('a-done'), 'status', 'done')
    # pending (head->tail): a-done? no: LPUSH a -> [a], rpush -> [a, ghost, a-done]; pops a-done, ghost, a
    j = q.claim(1)
    assert len(j) == 1 and j[0][0] == b'a'
    assert q.stats()['orphans'] == 2 and r.llen(q.pending) == 0
    # more than n+100 orphans
    r.rpush(q.pending, *[f'g{i}' for i in range(150)])
    r.lpush(q.pending, 'real')
    r.hset(q.jk('real'), mapping={'status': 'pending', 'payload': 'x', 'attempts': 0})
    assert q.claim(2) == []
    assert r.llen(q.pending) == 150 + 1 - 102 and q.stats()['orphans'] == 2 + 102
    j = q.claim(1); assert j[0][0] == b'real' and r.llen(q.pending) == 0
    # delayed: orphans, limit 100, earliest first, behind pending
    q2 = fresh('promo')
    q2.enqueue([(f'd{i:03}', 'p', 1) for i in range(150)])
    r.zadd(q2.delayed, {'dghost': 0})
    q2.enqueue([('p1', 'p', 0), ('p2', 'p', 0)])
    wait_ms(10)
    js = q2.claim(3)
    assert [x[0] for x in js] == [b'p1', b'p2', b'd000'], js
    assert r.zcard(q2.delayed) == 51 and r.llen(q2.pending) == 99 - 1 + 1 - 1 or True
    assert r.zcard(q2.delayed) == 51, r.zcard(q2.delayed)   # 99 promoted + ghost removed
    assert r.llen(q2.pending) == 98
    assert q2.job('d001')['status'] == b'pending' and q2.job('d120')['status'] == b'delayed'
    assert q2.stats()['orphans'] == 1
    assert r.lindex(q2.pending, -1) == b'd001' and r.lindex(q2.pending, 0) == b'd098'
    wl = r.llen(q2.wake); assert wl == 3  # the enqueues' 1 + 2; promotion pushes none
    # status not delayed in delayed zset -> orphan, hash left alone
    q3 = fresh('promo3')
    q3.enqueue([('x', 'p', 0)])
    r.zadd(q3.delayed, {'x': 0})
    j = q3.claim(5)
    assert len(j) == 1 and r.zcard(q3.delayed) == 0 and q3.stats()['orphans'] == 1
    # an id both pending (stale copy) and due delayed is claimed once
    q4 = fresh('promo4')
    q4.enqueue([('y', 'p', 5)])
    r.rpush(q4.pending, 'y')
    r.zadd(q4.delayed, {'y': 0})
    j = q4.claim(5)
    assert len(j) == 1 and j[0][0] == b'y' and q4.stats()['orphans'] == 1 and r.llen(q4.pending) == 0
    q4.enqueue([('z', 'p', 5)])
    r.rpush(q4.pending, 'z')
    r.zadd(q4.delayed, {'z': 0})
    q4.enqueue([('w', 'p', 0)])   # pending: w, z(stale copy at tail)
    j = q4.claim(1)
    assert j[0][0] == b'z' and r.lrange(q4.pending, 0, -1) == [b'z', b'w'] and q4.job('z')['status'] == b'processing'

@test
def wake_markers():
    q = fresh('wake')
    q.enqueue([(f'a{i}', 'p', 0) for i in range(1000)])
    q.enqueue([(f'b{i}', 'p', 0) for i in range(1000)])
    assert r.llen(q.wake) == 1024 and set(r.lrange(q.wake, 0, -1)) == {b'1'}
    q2 = fresh('wake2')
    q2.enqueue([('d', 'p', 1000), ('e', 'p', 0)])
    assert r.llen(q2.wake) == 2   # e's, and d's: d is the earliest delayed job

@test
def delayed_job_that_becomes_earliest_pushes_one_marker():
    q = fresh('wakedl')
    assert q.enqueue([('a', 'p', 100000), ('b', 'p', 50000)]) == [1, 1]
    assert r.llen(q.wake) == 1        # delayed was empty: one marker for the call
    q.enqueue([('c', 'p', 200000)])
    assert r.llen(q.wake) == 1        # not earliest: none
    q.enqueue([('d', 'p', 10000), ('e', 'p', 20000)])
    assert r.llen(q.wake) == 2        # d is earliest: exactly one for the call
    sc = r.zscore(q.delayed, 'd')
    r.zadd(q.delayed, {'d': sc + 100000})   # d's run-at moved past e's
    r.zadd(q.delayed, {'e': 0})
    q.enqueue([('f', 'p', 0), ('g', 'p', 1)])
    assert r.llen(q.wake) == 3        # f's only: g runs after e (score 0)
    q.enqueue([('a', 'p', 1)])
    assert r.llen(q.wake) == 3        # a duplicate adds nothing, pushes nothing
    # fail: a backoff that becomes the earliest pushes one, one that does not, none
    q2 = fresh('wakefl')
    q2.enqueue([('x', 'p', 0), ('y', 'p', 0)])
    jx, jy = q2.claim(2)
    assert r.llen(q2.wake) == 2     # the claim took exactly what pending held: not short
    r.delete(q2.wake)
    assert q2.fail('x', jx[3], 'e', 'retry', 5000) == b'delayed'
    assert r.llen(q2.wake) == 1
    assert q2.fail('y', jy[3], 'e', 'retry', 9000) == b'delayed'
    assert r.llen(q2.wake) == 1
    q2.enqueue([('z', 'p', 0)]); r.delete(q2.wake)
    jz = q2.claim(1)[0]
    assert q2.fail('z', jz[3], 'e', 'retry', 1000) == b'delayed'
    assert r.llen(q2.wake) == 1
    assert q2.fail('z', 'bad', 'e', 'retry', 1) == b'stale' and r.llen(q2.wake) == 1

@test
def stats_shape():
    q = fresh('stats')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 100000)])
    q.claim(1, vis=1); wait_ms(5); q.claim(1, vis=100000)
    a = q.ev('stats', [q.orphans])
    assert [x for x in a[0:14:2]] == [b'pending', b'processing', b'expired', b'delayed', b'due', b'dead', b'orphaned']
    assert all(isinstance(v, int) for v in a[1::2])
    st = q.stats(); st.pop('time')
    assert st == {'pending': 0, 'processing': 2, 'expired': 1, 'delayed': 1, 'due': 0, 'dead': 0, 'orphaned': 0, 'oldest_pending_ms': 0, 'enqueued': 3, 'claimed': 2}, st
    # stats with no ARGV works
    a2 = r.evalsha(SHAS['stats'], 8, *q.K, q.orphans)
    assert a2[:2] == [b'pending', 0]

KEY_TYPES = {0: 'list', 1: 'zset', 2: 'zset', 3: 'zset', 4: 'hash', 5: 'hash', 6: 'list', 7: 'zset'}

def set_wrong(key, want):
    r.delete(key)
    if want == 'list' or want == 'zset':
        r.hset(key, 'x', '1')
    else:
        r.sadd(key, 'x')

@test
def wrong_types():
    scenarios = []
    def prep_basic(q):
        make_dead(q, ['x', 'y'])
        q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 0), ('d', 'p', 1)])
        js = q.claim(2)
        wait_ms(10)
        return {j[0].decode(): j[3] for j in js}
    cases = [
        ('enqueue ready', lambda q, t: q.enqueue([('n1', 'p', 0)]), [0, 5, 6]),
        ('enqueue delayed', lambda q, t: q.enqueue([('n1', 'p', 10)]), [2, 5, 6]),
        ('enqueue both', lambda q, t: q.enqueue([('n1', 'p', 10), ('n2', 'p', 0)]), [0, 2, 5, 6]),
        ('claim', lambda q, t: q.claim(2), [0, 1, 2, 4, 5]),
        ('ack', lambda q, t: q.ack([('a', t['a']), ('b', 'bad')]), [1, 4, 5]),
        ('ack stale', lambda q, t: q.ack([('b', 'bad')]), [5]),
        ('extend', lambda q, t: q.extend(0, [('a', t['a']), ('b', 'bad')]), [1, 4, 5]),
        ('fail retry', lambda q, t: q.fail('a', t['a']), [1, 2, 4, 5, 6]),
        ('fail now', lambda q, t: q.fail('a', t['a'], 'e', 'retry', 0), [0, 1, 4, 5, 6]),
        ('fail dead', lambda q, t: q.fail('a', t['a'], 'e', 'dead', 0), [1, 3, 5]),
        ('fail stale', lambda q, t: q.fail('a', 'bad'), [5]),
        ('reap', lambda q, t: q.ev('reap', [q.orphans], 10), [0, 1, 2, 3, 4, 5, 6, 7]),
        ('stats', lambda q, t: q.ev('stats', [q.orphans]), [0, 1, 2, 3, 5, 7]),
        ('redrive ids', lambda q, t: q.redrive_ids(['x']), [0, 3, 5, 6]),
        ('redrive oldest', lambda q, t: q.redrive_oldest(1), [0, 3, 5, 6]),
        ('purge ids', lambda q, t: q.purge_ids(['x']), [3, 5]),
        ('purge oldest', lambda q, t: q.purge_oldest(5), [3, 5]),
    ]
    for name, fn, idxs in cases:
        for i in idxs:
            q = fresh('wt')
            t = prep_basic(q)
            if name == 'reap':
                r.hset(q.meta, mapping={'max_attempts': 3, 'dead_max_len': 1})
                r.hset(q.jk('a'), mapping={'attempts': 5, 'lease_until': 1})
                r.hset(q.jk('b'), mapping={'lease_until': 1})
                r.zadd(q.processing, {'a': 1, 'b': 1})
            key = (q.K + [q.orphans])[i]
            set_wrong(key, KEY_TYPES[i])
            snap = q.snapshot()
            m = err_of(lambda: fn(q, t))
            assert key in m and 'wrong type' in m and KEY_TYPES[i] in m, (name, i, m)
            assert q.snapshot() == snap, (name, i)
            # untouched keys don't matter
        # job key wrong type (claim and reap set such an id aside: cases_orphans.py)
    job_cases = [
        ('enqueue', lambda q, t: q.enqueue([('n0', 'p', 0), ('a', 'p', 0)]), 'a'),
        ('ack', lambda q, t: q.ack([('b', t['b']), ('a', t['a'])]), 'a'),
        ('extend', lambda q, t: q.extend(10, [('b', t['b']), ('a', t['a'])]), 'a'),
        ('fail', lambda q, t: q.fail('a', t['a']), 'a'),
        ('redrive', lambda q, t: q.redrive_ids(['y', 'x']), 'x'),
        ('redrive oldest', lambda q, t: q.redrive_oldest(2), 'y'),
        ('purge', lambda q, t: q.purge_ids(['x']), 'x'),
        ('purge oldest', lambda q, t: q.purge_oldest(2), 'y'),
    ]
    for name, fn, jid in job_cases:
        q = fresh('wt')
        t = prep_basic(q)
        r.delete(q.jk(jid)); r.set(q.jk(jid), 'str')
        snap = q.snapshot()
        m = err_of(lambda: fn(q, t))
        assert q.jk(jid) in m and 'wrong type (string)' in m and 'expected hash' in m, (name, m)
        assert q.snapshot() == snap, name
    # a key a call doesn't touch is not its business
    q = fresh('wt'); t = prep_basic(q)
    set_wrong(q.dead, 'zset'); set_wrong(q.wake, 'list')
    assert q.claim(1)[0][0] == b'c'
    assert q.ack([('a', t['a'])]) == [1]

@test
def claim_undo_order():
    q = fresh('undo')
    q.enqueue([(f'j{i}', 'p', 0) for i in range(6)])
    r.rpush(q.pending, 'ghost1', 'ghost2')       # orphans at the front
    r.set(q.processing, 'x')
    snap = q.snapshot()
    m = err_of(lambda: q.claim(10))
    assert q.processing in m and q.snapshot() == snap

@test
def malformed_args():
    q = fresh('bad')
    q.enqueue([('a', 'p', 0)])
    j = q.claim(1)[0]
    tok = j[3]
    K = q.K; jp = q.jp; ja = q.jk('a')
    KC = K + [q.orphans, q.claimreq('r')]
    def call(name, keys, *args):
        return lambda: r.evalsha(SHAS[name], len(keys), *keys, *args)
    cases = [
        ('n', call('enqueue', K + [ja], jp, 0)),
        ('n', call('enqueue', K + [ja], jp, 'x', 'b', 'p', 0)),
        ('n', call('enqueue', K + [ja], jp, '1.0', 'b', 'p', 0)),
        ('n', call('enqueue', K + [ja], jp, '1e0', 'b', 'p', 0)),
        ('n', call('enqueue', K + [ja], jp, '-1', 'b', 'p', 0)),
        ('n', call('enqueue', K + [ja] * 1001, jp, 1001, *(['b', 'p', 0] * 1001))),
        ('n', call('enqueue', K + [ja], jp, 1, 'b', 'p')),
        ('n', call('enqueue', K + [ja], jp, 1, 'b', 'p', 0, 'extra')),
        ('keys', call('enqueue', K, jp, 1, 'b', 'p', 0)),
        ('delay_ms', call('enqueue', K + [ja], jp, 1, 'b', 'p', -1)),
        ('delay_ms', call('enqueue', K + [ja], jp, 1, 'b', 'p', '1.5')),
        ('delay_ms', call('enqueue', K + [ja], jp, 1, 'b', 'p', 'soon')),
        ('delay_ms', call('enqueue', K + [ja], jp, 1, 'b', 'p', '')),
        ('delay_ms', call('enqueue', K + [ja], jp, 1, 'b', 'p', ' 5')),
        ('n', call('claim', KC, jp, 0, 'w', 0, 'r')),
        ('n', call('claim', KC, jp, 2, 'w', 0, 'r', 't1')),
        ('n', call('claim', KC, jp, 1, 'w', 0, 'r', 't1', 't2')),
        ('n', call('claim', KC, jp, 1, 'w', 0, 't1')),   # the request id is not optional
        ('n', call('claim', KC, jp, 1001, 'w', 0, 'r', *(['t'] * 1001))),
        ('visibility', call('claim', KC, jp, 1, 'w', -5, 'r', 't')),
        ('visibility', call('claim', KC, jp, 1, 'w', '2.5', 'r', 't')),
        ('visibility', call('claim', KC, jp, 1, 'w', 'abc', 'r', 't')),
        ('request', call('claim', KC, jp, 1, 'w', 0, '', 't')),
        ('request', call('claim', KC, jp, 1, 'w', 0, 'r' * 257, 't')),
        ('keys', call('claim', K[:6], jp, 1, 'w', 0, 'r', 't')),
        ('keys', call('claim', K + [q.orphans], jp, 1, 'w', 0, 'r', 't')),
        ('n', call('ack', K + [ja], jp, 'one', 'a', tok)),
        ('n', call('ack', K + [ja], jp, 2, 'a', tok)),
        ('n', call('ack', K + [ja], jp, 1, 'a', tok, 'x')),
        ('keys', call('ack', K + [ja, ja], jp, 1, 'a', tok)),
        ('ms', call('extend', K + [ja], jp, -1, 1, 'a', tok)),
        ('ms', call('extend', K + [ja], jp, '1e3', 1, 'a', tok)),
        ('n', call('extend', K + [ja], jp, 100, 0, 'a', tok)),
        ('n', call('extend', K + [ja], jp, 100, 1, 'a')),
        ('mode', call('fail', K + [ja], jp, 'a', tok, 'e', 'later', -1)),
        ('mode', call('fail', K + [ja], jp, 'a', tok, 'e', 'RETRY', -1)),
        ('mode', call('fail', K + [ja], jp, 'a', tok, 'e', 'Release', -1)),
        ('backoff', call('fail', K + [ja], jp, 'a', tok, 'e', 'release', -2)),
        ('backoff', call('fail', K + [ja], jp, 'a', tok, 'e', 'retry', -2)),
        ('backoff', call('fail', K + [ja], jp, 'a', tok, 'e', 'retry', '0.5')),
        ('backoff', call('fail', K + [ja], jp, 'a', tok, 'e', 'retry', 'x')),
        ('arguments', call('fail', K + [ja], jp, 'a', tok, 'e', 'retry')),
        ('keys', call('fail', K, jp, 'a', tok, 'e', 'retry', -1)),
        ('batch', call('reap', K, jp, 0)),
        ('batch', call('reap', K, jp, 1001)),
        ('batch', call('reap', K, jp, '10x')),
        ('batch', call('reap', K, jp, '-3')),
        ('mode', call('redrive', K, jp, 'all', 3)),
        ('n', call('redrive', K, jp, 'oldest', 0)),
        ('n', call('redrive', K, jp, 'oldest', 'many')),
        ('n', call('redrive', K, jp, 'oldest', 1001)),
        ('ids', call('redrive', K, jp, 'ids')),
        ('keys', call('redrive', K, jp, 'ids', 'a')),
        ('mode', call('purge', K, jp)),
        ('n', call('purge', K, jp, 'oldest', '')),
        ('ids', call('purge', K + [ja] * 1001, jp, 'ids', *(['a'] * 1001))),
    ]
    snap = q.snapshot()
    for name, fn in cases:
        m = err_of(fn)
        assert m.startswith(f'jobqueue: invalid {name}:') or f'invalid {name}:' in m, (name, m)
        assert q.snapshot() == snap, (name, m)
    # valid bounds
    assert q.extend(0, [('a', tok)])[0] > 0
    assert q.fail('a', tok, 'e', 'retry', '-1') == b'delayed'
    print('    sample messages:', err_of(cases[0][1]), '|', err_of(cases[15][1]), '|', err_of(cases[30][1]))

@test
def leading_zero_and_minus_zero():
    q = fresh('zero')
    assert q.enqueue([('a', 'p', '-0'), ('b', 'p', '000')]) == [1, 1]
    assert r.llen(q.pending) == 2
    assert len(q.ev('claim', [q.orphans, q.claimreq('z')], '01', 'w', '00', 'z', 'tok')[0]) == 1

@test
def orphans_set_aside_and_restored():
    q = fresh('orph')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('l', 'p', 0), ('d', 'p', 1)])
    r.rename(q.jk('a'), 'away:' + q.p + 'a')    # a slot migration: the hash is elsewhere
    jobs, more = q.claim_reply(1)
    assert [j[0] for j in jobs] == [b'b'] and more == 0
    assert r.zrange(q.orphans, 0, -1) == [b'a']  # set aside, scored when
    st = q.stats(); assert st['orphaned'] == 1 and st['set_aside'] == 1 and st['orphans'] == 1, st
    assert q.claim(1, vis=1)[0][0] == b'l'
    r.rename(q.jk('l'), 'away:' + q.p + 'l'); wait_ms(5)
    assert q.reap_reply() [:3] == [0, 0, 0]     # the expired lease of l: hash absent, set aside
    assert r.zcard(q.processing) == 1 and r.zscore(q.orphans, 'l') is not None
    assert q.reap_reply()[4] == 0               # still absent: they stay
    r.rename('away:' + q.p + 'a', q.jk('a')); r.rename('away:' + q.p + 'l', q.jk('l'))
    res = q.reap_reply()
    assert res[4] == 2 and r.zcard(q.orphans) == 0, res
    assert r.lrange(q.pending, -1, -1) == [b'a']          # pending: the front
    assert r.zscore(q.processing, 'l') == float(q.job('l')['lease_until'])
    st = q.stats(); assert st['restored'] == 2 and st['orphaned'] == 0, st
    # purge's orphans form forgets only ids whose hash is still absent
    q.enqueue([('g', 'p', 0), ('h', 'p', 0)])
    r.delete(q.jk('g')); r.rename(q.jk('h'), 'away:' + q.p + 'h')
    r.delete(q.pending); q.enqueue([('x', 'p', 0)]); r.lpush(q.pending, 'g', 'h')
    q.claim(3)
    assert sorted(r.zrange(q.orphans, 0, -1)) == [b'g', b'h']
    r.rename('away:' + q.p + 'h', q.jk('h'))
    assert q.purge_orphans(10) == 1 and r.zrangebyscore(q.orphans, 0, '+inf') == [b'h']
    assert r.zscore(q.orphans, 'g') < 0          # forgotten, remembered for reap a while
    assert q.stats()['orphans_purged'] == 1

@test
def reap_promotes_due_delayed():
    q = fresh('due')
    q.enqueue([('a', 'p', 1), ('b', 'p', 100000)])
    wait_ms(5)
    st = q.stats(); assert st['delayed'] == 2 and st['due'] == 1, st
    r.delete(q.wake)
    res = q.reap_reply()
    assert res == [0, 0, 0, 1, 0], res
    assert r.lrange(q.pending, 0, -1) == [b'a'] and q.job('a')['status'] == b'pending'
    assert r.llen(q.wake) == 1 and r.zrange(q.delayed, 0, -1) == [b'b']
    st = q.stats(); assert st['due'] == 0 and st['promoted'] == 1, st
    # more while due delayed jobs remain beyond the batch
    q.enqueue([('c', 'p', 1), ('d', 'p', 1)]); wait_ms(5)
    assert q.reap_reply(1) == [0, 0, 1, 1, 0]
    assert q.reap_reply(1) == [0, 0, 0, 1, 0]

@test
def claim_empties_wake_when_pending_runs_short():
    q = fresh('wk')
    q.enqueue([(f'j{i}', 'p', 0) for i in range(5)])
    assert r.llen(q.wake) == 5
    q.claim(3); assert r.llen(q.wake) == 5     # pending still holds jobs: markers stay
    r.lpop(q.wake)                             # a worker woken by a marker
    q.claim(2); assert r.llen(q.wake) == 4     # took exactly what was left: not short
    q.claim(1); assert r.llen(q.wake) == 0     # found pending empty: wake emptied
    r.set(q.wake, 'not a list')                # a wrong-typed wake is left as it is
    assert q.claim(1) == [] and r.get(q.wake) == b'not a list'
    r.delete(q.wake)

@test
def claim_says_more():
    q = fresh('more')
    q.enqueue([(f'o{i}', 'p', 0) for i in range(150)] + [('real', 'p', 0)])
    for i in range(150): r.hset(q.jk(f'o{i}'), 'status', 'done')
    jobs, more = q.claim_reply(1)
    assert jobs == [] and more == 1             # 101 ids examined, pending not empty
    jobs, more = q.claim_reply(1)
    assert [j[0] for j in jobs] == [b'real'] and more == 0
    jobs, more = q.claim_reply(1)
    assert jobs == [] and more == 0

@test
def claim_request_retry():
    q = fresh('creq')
    q.enqueue([('a', 'pa', 0), ('b', 'pb', 0), ('c', 'pc', 0)])
    first = q.claim_reply(2, vis=60000, tokens=['t1', 't2'], request='req1')
    assert [j[0] for j in first[0]] == [b'a', b'b'] and first[1] == 0
    # the record: its head (more, n, visibility, worker), then id, claim_token per lease;
    # it expires with the leases (the visibility, at most 60 s)
    t1, t2 = first[0][0][3], first[0][1][3]
    assert parse_token(t1)[2] == b't1' and parse_token(t2)[2] == b't2'
    assert r.lrange(q.claimreq('req1'), 0, -1) == [b'0:2:60000:w1', b'a', t1, b'b', t2]
    assert 0 < r.pttl(q.claimreq('req1')) <= 60000
    # the same request again: the same leases, nothing claimed, no attempt charged
    snap_jobs = (q.job('a'), q.job('b'), q.job('c'))
    again = q.claim_reply(2, vis=60000, tokens=['x1', 'x2'], request='req1')
    assert again == first, again
    assert (q.job('a'), q.job('b'), q.job('c')) == snap_jobs
    st = q.stats()
    assert st['claimed'] == 2 and st['replayed'] == 1 and st['pending'] == 1, st
    # an ended lease is left out; a renewed one comes back with its new lease_until
    assert q.ack([('a', t1)]) == [1]
    until = q.extend(120000, [('b', t2)])[0]
    jobs, more = q.claim_reply(2, vis=60000, request='req1')
    assert jobs == [[b'b', b'pb', 1, t2, until]] and more == 0, jobs
    # a lease taken away (reaped, then claimed by another request) is left out
    q2 = fresh('creq2')
    q2.enqueue([('x', 'p', 0)])
    q2.claim(1, vis=1, tokens=['old'], request='rq')
    wait_ms(5); assert q2.reap() == [1, 0, 0]
    assert parse_token(q2.claim(1, tokens=['new'], request='other')[0][3])[2] == b'new'
    assert q2.claim_reply(1, request='rq') == [[], 0]
    assert q2.job('x')['attempts'] == b'2'
    # an empty claim records nothing; another request claims anew
    q3 = fresh('creq3')
    assert q3.claim_reply(1, request='e') == [[], 0] and not r.exists(q3.claimreq('e'))
    q3.enqueue([('y', 'p', 0)])
    assert q3.claim(1, request='e')[0][0] == b'y'
    # once the record has expired, the same id claims anew
    q3.enqueue([('z', 'p', 0)])
    r.delete(q3.claimreq('e'))
    assert q3.claim(1, request='e')[0][0] == b'z'
    # a wrong-typed record fails the call, changing nothing (a string is settle_claim's
    # record: see cases_records.py)
    r.hset(q3.claimreq('bad'), 'x', 'y')
    q3.enqueue([('w', 'p', 0)])
    snap = q3.snapshot()
    m = err_of(lambda: q3.claim(1, request='bad'))
    assert q3.claimreq('bad') in m and 'wrong type' in m and q3.snapshot() == snap, m

# settle_claim: acks and fails of finished leases, then a claim, in one call -----------

@test
def settle_claim_acks_then_claims():
    q = fresh('sc')
    q.enqueue([('a', 'pa', 0), ('b', 'pb', 0), ('c', 'pc', 0)])
    ja = q.claim(1, tokens=['ta'])[0]
    t0 = now_ms()
    flat = q.settle_claim_flat(2, acks=[('a', ja[3])], worker='wk', request='rq1')
    t1 = now_ms()
    # the reply, flat: more, the leases' token, the ack results, the fail outcomes, then
    # id, payload, attempts, lease_until per leased job
    more, tok, acked, jobs = flat[0], flat[1], flat[2:3], flat[3:]
    claimed_at, worker, token = parse_token(tok)
    assert t0 <= claimed_at <= t1 and worker == b'wk' and token == b'@rq1'
    assert more == 0 and acked == [1] and len(jobs) == 8
    assert jobs[0::4] == [b'b', b'c'] and jobs[1::4] == [b'pb', b'pc'] and jobs[2::4] == [1, 1]
    assert jobs[3] == jobs[7] and r.zscore(q.processing, 'b') == jobs[3]
    assert not r.exists(q.jk('a')) and r.zscore(q.processing, 'a') is None
    assert q.job('b')['status'] == b'processing' and q.job('b')['claim_token'] == tok
    assert q.job('c')['claim_token'] == tok and int(q.job('b')['lease_until']) == jobs[3]
    st = q.stats()
    assert st['acked'] == 1 and st['claimed'] == 3 and st['processing'] == 2, st
    assert sum(v for k, v in st.items() if k.startswith('h:')) == 1, st
    # retention keeps the acked job as done, as ack does
    r.hset(q.meta, 'completed_retention_ms', 60000)
    jobs, _, acked, _ = q.settle_claim(1, acks=[('b', tok)])
    assert acked == [1] and jobs == [] and q.job('b')['status'] == b'done'
    assert 'lease_until' not in q.job('b') and r.pttl(q.jk('b')) > 0

@test
def settle_claim_stale_ack_is_counted_and_the_claim_happens():
    q = fresh('scst')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    ta = q.claim(1, tokens=['ta'])[0][3]
    jobs, more, acked, failed = q.settle_claim(1, acks=[('a', 'ta'), ('zz', 't')])
    assert acked == [0, 0] and [j[0] for j in jobs] == [b'b']
    st = q.stats(); assert st['stale'] == 1 and st['unknown'] == 1 and st['claimed'] == 2, st
    assert q.job('a')['claim_token'] == ta   # the holder keeps its lease
    # a job named twice is settled once
    jobs, _, acked, _ = q.settle_claim(1, acks=[('a', ta), ('a', ta)])
    assert acked == [1, 0] and q.stats()['stale'] == 2

@test
def settle_claim_fails_in_each_mode():
    q = fresh('scf')
    r.hset(q.meta, mapping={'max_attempts': 3, 'backoff_initial_ms': 5000})
    q.enqueue([(x, 'p', 0) for x in 'abcde'] + [('f', 'p', 0)])
    held = q.claim(5, tokens=['ta', 'tb', 'tc', 'td', 'te'])
    T = {j[0].decode(): j[3] for j in held}
    r.delete(q.wake)
    t0 = now_ms()
    jobs, more, acked, failed = q.settle_claim(1, fails=[
        ('a', T['a'], 'now', 'retry', 0), ('b', T['b'], 'policy', 'retry', -1),
        ('c', T['c'], 'dead', 'dead', -1), ('d', T['d'], '', 'release', 0),
        ('e', 'te', 'x', 'retry', -1)])
    t1 = now_ms()
    assert failed == [b'pending', b'delayed', b'dead', b'pending', b'stale'], failed
    assert acked == [] and [j[0] for j in jobs] == [b'f']   # claimed before they went back
    assert r.lrange(q.pending, 0, -1) == [b'a', b'd']       # a at the back, d at the front
    assert q.job('a')['last_error'] == b'now' and q.job('d')['attempts'] == b'0'
    assert 'last_error' not in q.job('d')
    assert t0 + 5000 <= r.zscore(q.delayed, 'b') <= t1 + 5000
    assert q.job('c')['status'] == b'dead' and r.zscore(q.dead, 'c') is not None
    for x in 'abcd':
        assert q.job(x)['claim_token'] == T[x] and 'lease_until' not in q.job(x)
        assert r.zscore(q.processing, x) is None
    assert r.llen(q.wake) == 3                  # a, d made ready; b the earliest delayed
    st = q.stats()
    assert (st['failed'], st['retried'], st['dead_lettered'], st['released'], st['stale']) == \
        (3, 2, 1, 1, 1), st
    # retry on the last attempt dead-letters, as fail does
    r.hset(q.meta, 'max_attempts', 1)
    jobs, _, _, failed = q.settle_claim(1, fails=[('f', jobs[0][3], 'x', 'retry', 0)])
    assert failed == [b'dead']

@test
def settle_claim_without_settles_is_a_claim():
    q = fresh('sce')
    q.enqueue([('a', 'p', 0)])
    first = q.settle_claim(2, request='r1', vis=5000)
    tok = q.tok('a')
    assert parse_token(tok)[2] == b'@r1'
    assert first == [[[b'a', b'p', 1, tok, first[0][0][4]]], 0, [], []]
    assert q.settle_claim(2, request='r1', vis=5000) == first
    assert 4000 < r.pttl(q.claimreq('r1')) <= 5000
    assert q.settle_claim(1, request='r2') == [[], 0, [], []]
    assert not r.exists(q.claimreq('r2'))     # nothing claimed or settled: no record

@test
def settle_claim_resend_settles_once():
    q = fresh('scr')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0), ('c', 'p', 0)])
    q.claim(2, tokens=['ta', 'tb'])
    call = dict(acks=[('a', q.tok('a'))], fails=[('b', q.tok('b'), 'e', 'retry', 0)], request='req')
    first = q.settle_claim(1, **call)
    again = q.settle_claim(1, **call)
    assert first == again and first[2] == [1] and first[3] == [b'pending'], (first, again)
    st = q.stats()
    assert (st['acked'], st['failed'], st['claimed'], st['replayed'], st.get('stale', 0)) == \
        (1, 1, 3, 1, 0), st
    assert r.lrange(q.pending, 0, -1) == [b'b']
    # a settle-only call is recorded too: its resend is not counted stale
    tc = q.tok('c')
    q.settle_claim(1, acks=[('c', tc)], request='only')
    assert q.settle_claim(1, acks=[('c', tc)], request='only')[2] == [1]
    assert q.stats().get('stale', 0) == 0

@test
def settle_claim_bad_arguments_are_named_and_change_nothing():
    q = fresh('scargs')
    q.enqueue([('a', 'p', 0)])
    ja = q.claim(1, tokens=['ta'])
    snap = q.snapshot()
    K = [q.orphans, q.claimreq('r')]
    def bad(args, keys=K):
        return err_of(lambda: q.ev('settle_claim', keys, *args))
    for args, name in [
            (['0', 'w', '0', 'r', '0', '0'], 'invalid n'),
            (['1', 'w', '-1', 'r', '0', '0'], 'invalid visibility'),
            (['1', 'w', '0', '', '0', '0'], 'invalid request'),
            (['1', 'w', '0', 'r', 'x', '0'], 'invalid acks'),
            (['1', 'w', '0', 'r', '0', '1001'], 'invalid fails'),
            (['1', 'w', '0', 'r', '500', '501'], 'invalid fails'),
            (['1', 'w', '0', 'r', '1', '0', 'a'], 'invalid arguments'),
            (['1', 'w', '0', 'r', '1', '0', 'a', 'ta', 'extra'], 'invalid arguments'),
            (['1', 'w', '0', 'r', '0', '0', 't'], 'invalid arguments'),
            (['1', 'w', '0', 'r', '0', '1', 'a', 'ta', 'e', 'later', '-1'], 'invalid mode'),
            (['1', 'w', '0', 'r', '0', '1', 'a', 'ta', 'e', 'retry', '-2'], 'invalid backoff')]:
        m = bad(args)
        assert m.startswith('jobqueue: ' + name) or ('jobqueue: ' + name) in m, (args, m)
    m = bad(['1', 'w', '0', 'r', '0', '0'], keys=[q.orphans])
    assert 'invalid keys' in m, m
    assert q.snapshot() == snap

@test
def settle_claim_wrong_typed_keys_are_named_and_change_nothing():
    q = fresh('sctype')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    q.claim(1, tokens=['ta'])
    ta = q.tok('a')
    for key, want in [(q.stats_key, 'hash'), (q.dead, 'zset'), (q.jk('x'), 'hash')]:
        saved = r.dump(key) if r.exists(key) else None
        r.delete(key); r.set(key, 'oops')
        snap = q.snapshot()
        fails = [('a', ta, 'e', 'dead', -1)] if key == q.dead else []
        acks = [('x', 't')] if key == q.jk('x') else ([('a', ta)] if not fails else [])
        m = err_of(lambda: q.settle_claim(1, acks=acks, fails=fails, request='q'))
        assert key in m and 'wrong type' in m and want in m, m
        assert q.snapshot() == snap, key
        r.delete(key)
        if saved is not None: r.restore(key, 0, saved)
    # processing, when nothing is claimed: pending is empty now
    q.claim(1, tokens=['tb'])
    tb = q.tok('b')
    r.rename(q.processing, 'saved:' + q.processing); r.set(q.processing, 'oops')
    snap = q.snapshot()
    m = err_of(lambda: q.settle_claim(1, acks=[('a', ta)]))
    assert q.processing in m and 'wrong type' in m and q.snapshot() == snap, m
    r.delete(q.processing); r.rename('saved:' + q.processing, q.processing)
    assert q.settle_claim(1, acks=[('a', ta), ('b', tb)])[2] == [1, 1]

# the job layout ---------------------------------------------------------------------

@test
def a_job_enqueued_ready_holds_only_its_payload_and_arrival():
    q = fresh('lean')
    q.enqueue([('a', 'pa', 0), ('d', 'pd', 60000)])
    assert set(q.job('a')) == {'payload', 'enqueued_at'}  # no status: pending
    h = q.job('d')
    assert h['status'] == b'delayed' and 'enqueued_at' in h and 'attempts' not in h
    # an ack or extend for a pending job is stale (it exists), not unknown
    assert q.ack([('a', 't')]) == [0] and q.extend(0, [('a', 't')]) == [0]
    st = q.stats(); assert st['stale'] == 2 and st.get('unknown', 0) == 0, st
    assert q.fail('a', 't') == b'stale'
    j = q.claim(1, tokens=['ta'])[0]
    assert j[:3] == [b'a', b'pa', 1] and parse_token(j[3])[2] == b'ta'
    assert q.job('a')['status'] == b'processing'
    # a set-aside id whose lean hash came back is restored to pending
    q.enqueue([('s', 'ps', 0)])
    r.zadd(q.orphans, {'s': 1}); r.lrem(q.pending, 0, 's')
    assert q.reap_reply()[4] == 1 and r.lrange(q.pending, 0, -1) == [b's']

@test
def a_job_in_the_older_layout_is_still_served():
    q = fresh('old')
    # as enqueue wrote it before: payload, status pending, enqueued_at
    r.hset(q.jk('o'), mapping={'payload': 'po', 'status': 'pending', 'enqueued_at': now_ms()})
    r.lpush(q.pending, 'o')
    j = q.claim(1, tokens=['to'])[0]
    assert j[:3] == [b'o', b'po', 1] and parse_token(j[3])[2] == b'to'
    assert q.settle_claim(1, acks=[('o', j[3])])[2] == [1] and not r.exists(q.jk('o'))
    # a lease of the older layout: claimed_at and worker are fields, the token the
    # caller's alone; ack still takes it and reads claimed_at for the histogram
    r.hset(q.jk('l'), mapping={'payload': 'pl', 'status': 'processing', 'claim_token': 'tl',
                               'attempts': 1, 'claimed_at': now_ms() - 1500, 'worker': 'w',
                               'lease_until': now_ms() + 60000})
    r.zadd(q.processing, {'l': now_ms() + 60000})
    before = q.stats().get('h:10', 0)
    assert q.settle_claim(1, acks=[('l', 'tl')])[2] == [1] and not r.exists(q.jk('l'))
    assert q.stats().get('h:10', 0) == before + 1

def main():
    # the cases of one area each live in cases_*.py beside this file
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith('cases_') and name.endswith('.py'):
            __import__(name[:-3])
    failed = 0
    for f in TESTS:
        try:
            f()
            print('ok  ', f.__name__)
        except Exception:
            failed += 1
            print('FAIL', f.__name__)
            traceback.print_exc()
    print(f'conformance ({MODE}): {len(TESTS) - failed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    try:
        code = main()
    finally:
        stop_server()
    sys.exit(code)
