"""Cancel one job (manage.lua `cancel` and `cancelled`), extend's -1 for a lease whose
cancellation was asked for, and reap ending such a lease that expired as cancelled."""
from jq import *


def manage(q, action, *rest):
    keys = [q.jk(rest[0])] if rest else []
    return q.ev('manage', keys, action, *rest)


@test
def cancel_ends_pending_and_delayed_jobs_and_keeps_their_hash_for_the_retention():
    q = fresh('cancel1')
    r.hset(q.meta, 'completed_retention_ms', 60000)
    q.enqueue([('p', 'x', 0), ('d', 'x', 3600000), ('other', 'x', 0)])
    assert manage(q, 'cancel', 'p') == b'pending'
    assert b'p' not in r.lrange(q.pending, 0, -1)
    assert q.job('p')['status'] == b'cancelled'
    assert 0 < r.pttl(q.jk('p')) <= 60000
    assert manage(q, 'cancel', 'd') == b'delayed'
    assert r.zscore(q.delayed, 'd') is None
    assert q.job('d')['status'] == b'cancelled'
    assert q.stats()['cancelled'] == 2
    # a cancelled job is not cancelled again, nor run now; nothing changes
    snap = q.snapshot()
    assert manage(q, 'cancel', 'p') == b'cancelled'
    assert manage(q, 'run', 'd') == 0
    assert manage(q, 'cancel', 'nope') == b'absent'
    assert q.snapshot() == snap
    # the rest of the queue is served as before
    assert [j[0] for j in q.claim(5)] == [b'other']


@test
def cancel_without_retention_deletes_the_hash_and_leaves_dead_jobs_alone():
    q = fresh('cancel2')
    q.enqueue([('p', 'x', 0), ('z', 'x', 0)])
    assert manage(q, 'cancel', 'p') == b'pending'
    assert not r.exists(q.jk('p'))
    [jz] = q.claim(1)
    assert q.fail('z', jz[3], 'e', 'dead', 0) == b'dead'
    snap = q.snapshot()
    assert manage(q, 'cancel', 'z') == b'dead'
    assert q.snapshot() == snap
    assert q.stats()['cancelled'] == 1


@test
def a_leased_job_learns_its_cancellation_at_extend_and_ends_with_cancelled():
    q = fresh('cancel3')
    r.hset(q.meta, 'completed_retention_ms', 60000)
    q.enqueue([('a', 'x', 0), ('b', 'x', 0)])
    ja, jb = q.claim(2)
    assert manage(q, 'cancel', 'a') == b'processing'
    first = q.job('a')['cancel_requested']
    assert manage(q, 'cancel', 'a') == b'processing'
    assert q.job('a')['cancel_requested'] == first  # kept when set already
    assert r.zscore(q.processing, 'a') is not None
    assert 'cancelled' not in q.stats()
    # extend: -1 for the cancelled one (its lease still extended), a lease for the other
    res = q.extend(60000, [('a', ja[3]), ('b', jb[3])])
    assert res[0] == -1 and res[1] > 0, res
    assert int(q.job('a')['lease_until']) > now_ms() + 30000
    # the worker ends it: not with another token, and not a job without cancel_requested
    snap = q.snapshot()
    assert manage(q, 'cancelled', 'a', 'wrong-token') == 0
    assert manage(q, 'cancelled', 'b', jb[3]) == 0
    assert q.snapshot() == snap
    assert manage(q, 'cancelled', 'a', ja[3]) == 1
    assert r.zscore(q.processing, 'a') is None
    assert q.job('a')['status'] == b'cancelled'
    assert 'lease_until' not in q.job('a')
    assert 0 < r.pttl(q.jk('a')) <= 60000
    assert q.stats()['cancelled'] == 1
    assert manage(q, 'cancelled', 'a', ja[3]) == 0
    # an ack of the lease now is stale
    assert q.ack([('a', ja[3])]) == [0]


@test
def reap_ends_an_expired_lease_whose_cancellation_was_asked_for_as_cancelled():
    q = fresh('cancel4')
    q.enqueue([('a', 'x', 0), ('b', 'x', 0)])
    ja, jb = q.claim(2, vis=1)
    assert manage(q, 'cancel', 'a') == b'processing'
    wait_ms(5)
    requeued, dead, more = q.reap()
    assert (requeued, dead) == (1, 0), (requeued, dead)  # b only
    assert not r.exists(q.jk('a'))  # no completed retention: the hash goes
    assert r.zscore(q.processing, 'a') is None
    assert r.lrange(q.pending, 0, -1) == [b'b']
    s = q.stats()
    assert s['cancelled'] == 1 and s['reaped'] == 1, s


@test
def a_job_retried_after_its_cancellation_was_asked_for_is_cancelled_at_its_next_extend():
    q = fresh('cancel5')
    q.enqueue([('a', 'x', 0)])
    [ja] = q.claim(1)
    assert manage(q, 'cancel', 'a') == b'processing'
    assert q.fail('a', ja[3], 'boom', 'retry', 0) == b'pending'
    [ja] = q.claim(1)
    assert q.extend(60000, [('a', ja[3])]) == [-1]


@test
def cancel_refuses_bad_arguments_naming_them():
    q = fresh('cancelbad')
    snap = q.snapshot()
    m = err_of(lambda: q.ev('manage', [q.jk('x')], 'cancel'))
    assert m.startswith('jobqueue: invalid arguments: expected 3 (prefix, cancel, id), got 2'), m
    m = err_of(lambda: q.ev('manage', [q.jk('x')], 'cancelled', 'x'))
    assert m.startswith('jobqueue: invalid arguments: expected 4 (prefix, cancelled, id, token)'), m
    m = err_of(lambda: q.ev('manage', [], 'cancel', 'x'))
    assert m.startswith('jobqueue: invalid keys: expected 8 keys'), m
    r.set(q.jk('w'), 'x')
    m = err_of(lambda: q.ev('manage', [q.jk('w')], 'cancel', 'w'))
    assert 'holds the wrong type (string), expected hash' in m, m
    r.delete(q.jk('w'))
    assert q.snapshot() == snap
