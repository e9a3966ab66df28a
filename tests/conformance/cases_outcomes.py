"""Outcomes (docs/protocol.md, Outcomes): extend's progress block, ack's and settle_claim's
results block, enqueue's `notify` option with the P:{T}:done stream, and the P:{T}:events
stream of a queue whose meta holds events_max_len."""
from jq import *


def done_ids(q):
    return [f[b'id'] for _, f in r.xrange(q.p + 'done')]


def events(q):
    return [(f[b'event'], f[b'id'], f.get(b'error')) for _, f in r.xrange(q.p + 'events')]


def ack_results(q, pairs, results):
    args = [x for p in pairs for x in p] + ['results'] + [x for res in results for x in res]
    return q.ev('ack', [q.jk(p[0]) for p in pairs], len(pairs), *args)


def extend_progress(q, ms, pairs, progress):
    args = [x for p in pairs for x in p] + ['progress'] + [x for t in progress for x in t]
    return q.ev('extend', [q.jk(p[0]) for p in pairs], ms, len(pairs), *args)


@test
def extend_writes_the_progress_of_the_leases_it_extends():
    q = fresh('out1')
    q.enqueue([('a', 'x', 0), ('b', 'x', 0)])
    ja, jb = q.claim(2)
    res = extend_progress(q, 60000, [('a', ja[3]), ('b', jb[3])], [(2, 40, 'copying')])
    assert res[0] > 0 and res[1] > 0, res
    b = q.job('b')
    assert b['progress'] == b'40' and b['progress_msg'] == b'copying'
    assert abs(int(b['progress_at']) - now_ms()) < 5000
    assert 'progress' not in q.job('a')
    # a stale pair's progress is not written
    res = extend_progress(q, 60000, [('a', 'wrong')], [(1, 10, 'no')])
    assert res == [0] and 'progress' not in q.job('a')


@test
def a_bad_progress_block_fails_the_call_and_changes_nothing():
    q = fresh('out2')
    q.enqueue([('a', 'x', 0)])
    [ja] = q.claim(1)
    snap = q.snapshot()
    cases = [
        ([(1, 101, 'x')], 'invalid progress: expected a percent 0..100 for pair 1, got "101"'),
        ([(1, -1, 'x')], 'invalid progress: expected a percent 0..100 for pair 1, got "-1"'),
        ([(2, 10, 'x')], 'invalid progress: expected a pair index 1..1 given once, got "2"'),
        ([(1, 10, 'x' * 257)], 'invalid progress: expected a message of at most 256 bytes for pair 1, got 257 bytes'),
        ([(1, 10, 'x'), (1, 20, 'y')], 'invalid progress: expected triples index, percent, message (at most 1)'),
    ]
    for block, want in cases:
        e = err_of(lambda: extend_progress(q, 60000, [('a', ja[3])], block))
        assert want in e, (want, e)
    e = err_of(lambda: q.ev('extend', [q.jk('a')], 60000, 1, 'a', ja[3], 'progress', 1, 10))
    assert 'invalid progress: expected triples' in e, e
    assert q.snapshot() == snap


@test
def ack_stores_a_result_kept_with_the_completed_retention():
    q = fresh('out3')
    r.hset(q.meta, 'completed_retention_ms', 60000)
    q.enqueue([('a', 'x', 0), ('b', 'x', 0)])
    ja, jb = q.claim(2)
    assert ack_results(q, [('a', ja[3]), ('b', jb[3])], [(1, b'\x00bytes\xff')]) == [1, 1]
    assert q.job('a')['result'] == b'\x00bytes\xff' and q.job('a')['status'] == b'done'
    assert 'result' not in q.job('b')
    # without retention and without notify the hash goes, result and all
    q2 = fresh('out3b')
    q2.enqueue([('c', 'x', 0)])
    [jc] = q2.claim(1)
    assert ack_results(q2, [('c', jc[3])], [(1, 'r')]) == [1]
    assert not r.exists(q2.jk('c'))


@test
def a_result_over_64_kib_or_a_bad_results_block_fails_the_call_and_changes_nothing():
    q = fresh('out4')
    q.enqueue([('a', 'x', 0)])
    [ja] = q.claim(1)
    snap = q.snapshot()
    e = err_of(lambda: ack_results(q, [('a', ja[3])], [(1, b'x' * 65537)]))
    assert 'invalid result: expected at most 65536 bytes for pair 1, got 65537 bytes' in e, e
    e = err_of(lambda: ack_results(q, [('a', ja[3])], [(0, b'x')]))
    assert 'invalid results: expected a pair index 1..1 given once, got "0"' in e, e
    e = err_of(lambda: q.ev('ack', [q.jk('a')], 1, 'a', ja[3], 'results', 1))
    assert 'invalid results: expected pairs index, result (at most 1)' in e, e
    assert q.snapshot() == snap
    # exactly 64 KiB is taken
    assert ack_results(q, [('a', ja[3])], [(1, b'x' * 65536)]) == [1]


@test
def settle_claim_stores_its_acks_results_and_its_retry_replays_them():
    q = fresh('out5')
    q.enqueue([('a', 'x', 0), ('b', 'x', 0)])
    ja, jb = q.claim(2)
    request = 'req-out5'
    args = ['a', ja[3], 'b', jb[3], 'results', 2, 'result of b']
    flat = q.ev('settle_claim', [q.orphans, q.claimreq(request)], 1, 'w1', 0, request, 2, 0, *args)
    assert flat[2:4] == [1, 1], flat
    # b carries no notify and the queue keeps nothing: deleted
    assert not r.exists(q.jk('b'))
    again = q.ev('settle_claim', [q.orphans, q.claimreq(request)], 1, 'w1', 0, request, 2, 0, *args)
    assert again[2:4] == [1, 1]
    # other results are other arguments: the record refuses them
    other = args[:-1] + ['another']
    e = err_of(lambda: q.ev('settle_claim', [q.orphans, q.claimreq(request)], 1, 'w1', 0, request, 2, 0, *other))
    assert 'invalid request' in e, e
    e = err_of(lambda: q.ev('settle_claim', [q.orphans, q.claimreq('r2')], 1, 'w1', 0, 'r2', 0, 0, 'results', 1, 'x'))
    assert 'invalid results' in e, e


@test
def notify_keeps_the_hash_and_announces_final_ends_on_done():
    q = fresh('out6')
    r.hset(q.meta, 'max_attempts', 2)
    args = [('a', 'x', 0), ('b', 'x', 0), ('c', 'x', 0), ('d', 'x', 0), ('e', 'x', 0)]
    flat = [x for j in args for x in j]
    assert q.ev('enqueue', [q.jk(j[0]) for j in args], 5, *flat, 'options', 'notify', 30000) == [1] * 5
    assert q.job('a')['notify'] == b'30000'
    ja, jb, jc = q.claim(3)
    assert ack_results(q, [('a', ja[3])], [(1, 'ra')]) == [1]
    # kept though the queue keeps no completed job
    assert q.job('a')['status'] == b'done' and q.job('a')['result'] == b'ra'
    assert 0 < r.pttl(q.jk('a')) <= 30000
    # a retried failure is no final end; a dead-lettering is
    assert q.fail('b', jb[3], 'flaky', 'retry', 0) == b'pending'
    assert q.fail('c', jc[3], 'broken', 'dead', 0) == b'dead'
    # cancelled: kept for notify, though the queue keeps nothing
    assert q.ev('manage', [q.jk('e')], 'cancel', 'e') == b'pending'
    assert q.job('e')['status'] == b'cancelled' and 0 < r.pttl(q.jk('e')) <= 30000
    assert done_ids(q) == [b'a', b'c', b'e']
    # reap: an expired lease dead-lettered (attempts at the max) is announced
    [jb2] = [j for j in q.claim(2, vis=1) if j[0] == b'b']
    wait_ms(5)
    assert q.reap()[1] >= 1
    assert q.job('b')['status'] == b'dead'
    assert done_ids(q)[-1] == b'b'
    bad = err_of(lambda: q.ev('enqueue', [q.jk('f')], 1, 'f', 'x', 0, 'options', 'notify', '0'))
    assert 'invalid notify: expected an integer 1..10^15 ms, got "0"' in bad, bad
    assert not r.exists(q.jk('f'))


@test
def events_follow_every_end_in_order_while_events_max_len_is_set():
    q = fresh('out7')
    q.enqueue([('a', 'x', 0), ('b', 'x', 0), ('c', 'x', 0)])
    ja, jb = q.claim(2)
    assert q.ack([('a', ja[3])]) == [1]
    assert not r.exists(q.p + 'events')  # off: nothing appended
    r.hset(q.meta, 'events_max_len', 100)
    assert q.fail('b', jb[3], 'flaky', 'retry', 0) == b'pending'
    assert q.ev('manage', [q.jk('c')], 'cancel', 'c') == b'pending'
    [jb] = q.claim(1)
    assert q.fail('b', jb[3], 'broken', 'dead', 0) == b'dead'
    q.enqueue([('d', 'x', 0)])
    [jd] = q.claim(1, vis=1)
    wait_ms(5)
    assert q.reap()[0] == 1  # requeued: a failed attempt
    assert events(q) == [
        (b'failed', b'b', b'flaky'),
        (b'cancelled', b'c', None),
        (b'dead', b'b', b'broken'),
        (b'failed', b'd', b'lease expired'),
    ], events(q)
    # a release is no end
    [jd] = q.claim(1)
    n = len(events(q))
    assert q.release_(jd[0].decode(), jd[3]) == b'pending'
    assert len(events(q)) == n


@test
def the_events_stream_is_capped_about_at_events_max_len():
    q = fresh('out8')
    r.hset(q.meta, 'events_max_len', 5)
    for i in range(3):
        q.enqueue([(f'j{i}-{k}', 'x', 0) for k in range(100)])
        jobs = q.claim(100)
        assert q.ack([(j[0].decode(), j[3]) for j in jobs]) == [1] * 100
    n = r.xlen(q.p + 'events')
    assert 5 <= n <= 105, n
