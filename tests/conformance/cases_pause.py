"""Pause and resume a queue, run a delayed job now, delete one job (manage.lua): while
meta holds `paused`, claim and settle_claim's claim part lease and promote nothing, and
everything else (enqueue, ack, extend, fail, reap) goes on."""
from jq import *


def manage(q, action, *rest):
    keys = [q.jk(rest[0])] if rest else []
    return q.ev('manage', keys, action, *rest)


@test
def a_paused_queue_leases_nothing_and_producers_go_on():
    q = fresh('pause1')
    q.enqueue([('a', 'pa', 0), ('b', 'pb', 0)])
    [job] = q.claim(1)
    assert manage(q, 'pause') == 1
    assert manage(q, 'pause') == 0  # already paused
    assert r.hexists(q.meta, 'paused')
    # producers go on
    assert q.enqueue([('c', 'pc', 0), ('d', 'pd', 1)]) == [1, 1]
    wait_ms(5)
    assert q.claim_reply(5) == [[], 0]
    # nothing leased, nothing promoted (d is due), no record written; wake emptied
    assert r.zscore(q.delayed, 'd') is not None
    assert r.llen(q.pending) == 2 and r.llen(q.wake) == 0
    # settle_claim: the ack is applied, the claim part leases nothing
    flat = q.settle_claim_flat(3, acks=[('a', job[3])])
    assert flat == [0, b'', 1], flat
    assert not r.exists(q.jk('a'))
    assert r.zcard(q.processing) == 0
    # reap still promotes due delayed jobs
    assert q.reap_reply()[3] == 1
    assert r.llen(q.pending) == 3
    # resume: claims again, and sleeping workers get one marker per pending job
    r.delete(q.wake)
    assert manage(q, 'resume') == 1
    assert manage(q, 'resume') == 0
    assert r.llen(q.wake) == 3
    assert [j[0] for j in q.claim(5)] == [b'b', b'c', b'd']


@test
def extend_and_fail_still_work_while_paused():
    q = fresh('pause2')
    q.enqueue([('a', 'pa', 0), ('b', 'pb', 0)])
    ja, jb = q.claim(2)
    manage(q, 'pause')
    assert q.extend(60000, [('a', ja[3])])[0] > 0
    assert q.fail('a', ja[3], 'boom', 'retry', 0) == b'pending'
    assert q.fail('b', jb[3], 'boom', 'dead', 0) == b'dead'
    assert q.claim(1) == []


@test
def run_now_moves_a_delayed_job_to_the_front():
    q = fresh('runnow')
    q.enqueue([('a', 'pa', 0), ('late', 'pl', 3600000)])
    r.delete(q.wake)
    assert manage(q, 'run', 'late') == 1
    assert q.job('late')['status'] == b'pending'
    assert r.zscore(q.delayed, 'late') is None
    assert r.llen(q.wake) == 1
    assert q.stats()['run_now'] == 1
    # first in line, before the job that was already pending
    assert [j[0] for j in q.claim(2)] == [b'late', b'a']
    # not delayed (any more), or no job: nothing changes
    snap = q.snapshot()
    assert manage(q, 'run', 'late') == 0
    assert manage(q, 'run', 'nope') == 0
    assert q.snapshot() == snap


@test
def delete_removes_pending_delayed_and_dead_jobs_but_never_a_lease():
    q = fresh('del1')
    q.enqueue([('p', 'x', 0), ('keep', 'x', 0), ('d', 'x', 3600000), ('l', 'x', 0)])
    q.enqueue([('z', 'x', 0)])
    # l and p are claimed first: enqueue order; claim 'p' then kill it
    jp, jk = q.claim(2)
    assert jp[0] == b'p'
    assert q.fail('p', jp[3], 'e', 'dead', 0) == b'dead'
    # keep is leased now
    assert jk[0] == b'keep'
    assert manage(q, 'delete', 'p') == b'dead'
    assert not r.exists(q.jk('p')) and r.zscore(q.dead, 'p') is None
    assert manage(q, 'delete', 'd') == b'delayed'
    assert not r.exists(q.jk('d')) and r.zscore(q.delayed, 'd') is None
    assert manage(q, 'delete', 'l') == b'pending'
    assert not r.exists(q.jk('l')) and b'l' not in r.lrange(q.pending, 0, -1)
    snap = q.snapshot()
    assert manage(q, 'delete', 'keep') == b'processing'
    assert manage(q, 'delete', 'gone') == b'absent'
    assert q.snapshot() == snap
    assert q.stats()['deleted'] == 3
    # the rest of the queue is served as before
    assert [j[0] for j in q.claim(5)] == [b'z']


@test
def manage_refuses_bad_arguments_naming_them():
    q = fresh('mbad')
    snap = q.snapshot()
    m = err_of(lambda: q.ev('manage', [], 'stop'))
    assert m.startswith('jobqueue: invalid action: expected "pause", "resume", "run", '
                        '"delete", "cancel" or "cancelled", got "stop"'), m
    m = err_of(lambda: q.ev('manage', [], 'run', 'x'))
    assert m.startswith('jobqueue: invalid keys: expected 8 keys'), m
    m = err_of(lambda: q.ev('manage', [q.jk('x')], 'delete'))
    assert m.startswith('jobqueue: invalid arguments: expected 3'), m
    m = err_of(lambda: q.ev('manage', [q.jk('')], 'delete', ''))
    assert m.startswith('jobqueue: invalid id: expected an id of 1..1024 bytes, got 0'), m
    m = err_of(lambda: q.ev('manage', [], 'pause', 'extra'))
    assert m.startswith('jobqueue: invalid arguments: expected 2'), m
    r.set(q.meta, 'x')
    m = err_of(lambda: q.ev('manage', [], 'pause'))
    assert 'holds the wrong type (string), expected hash' in m, m
    # a wrong-typed meta fails claims too, as any read of it
    m = err_of(lambda: q.claim(1))
    assert 'holds the wrong type (string), expected hash' in m, m
    r.delete(q.meta)
    assert q.snapshot() == snap


@test
def claims_score_their_worker_in_workers_and_reap_forgets_it_after_an_hour():
    q = fresh('workers1')
    wk = q.p + 'workers'
    q.enqueue([('a', 'pa', 0)])
    t0 = now_ms()
    q.claim(1, worker='w-1')
    q.settle_claim(1, worker='w-2')  # claims nothing: still seen
    manage(q, 'pause')
    q.claim(1, worker='w-3')  # paused: still seen
    seen = dict(r.zrange(wk, 0, -1, withscores=True))
    assert set(seen) == {b'w-1', b'w-2', b'w-3'}, seen
    assert all(s >= t0 for s in seen.values())
    r.zadd(wk, {'old': now_ms() - 3600000 - 5000})
    q.reap()
    assert r.zscore(wk, 'old') is None and r.zscore(wk, 'w-1') is not None
    # a wrong-typed workers key does not fail a claim
    r.delete(wk)
    r.set(wk, 'x')
    manage(q, 'resume')
    assert q.claim(1) == []
    assert r.get(wk) == b'x'
    r.delete(wk)
