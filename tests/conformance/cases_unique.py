"""Unique keys: enqueue's `unique` block (a lock P:{T}:unique:<key> naming the job that
holds the key), refusal with the holder's id, debounce, the window, and the release of
the lock by each script that ends a job (docs/protocol.md, Unique keys)."""
from jq import *


def enqueue_unique(q, jobs, keys, mode='until-done', for_ms=0, options=()):
    """enqueue with the unique block: jobs as (id, payload, delay) triples, one key each."""
    args = [x for j in jobs for x in j] + ['unique', mode, for_ms, *keys] + list(options)
    return q.ev('enqueue', [q.jk(j[0]) for j in jobs], len(jobs), *args)


def lock(q, key):
    k = key if isinstance(key, bytes) else key.encode()
    return r.get(q.p.encode() + b'unique:' + k)


def manage(q, action, *rest):
    return q.ev('manage', [q.jk(rest[0])], action, *rest)


@test
def unique_refuses_a_second_job_with_the_holders_id_and_writes_nothing():
    q = fresh('uq1')
    assert enqueue_unique(q, [('a', 'one', 0)], ['k']) == [1]
    assert lock(q, 'k') == b'a'
    assert r.pttl(q.p + 'unique:k') == -1  # no window: held as long as the mode says
    h = q.job('a')
    assert h['unique_key'] == b'k' and h['unique_mode'] == b'until-done'
    snap = q.snapshot()
    assert enqueue_unique(q, [('b', 'two', 0)], ['k']) == [[2, b'a']]
    assert q.snapshot() == snap  # no job, no counter, no history, no marker
    # the id check comes first: an id already there answers 0
    assert enqueue_unique(q, [('a', 'x', 0)], ['other']) == [0]
    # a call without the block is not concerned by the lock
    assert q.enqueue([('c', 'free', 0)]) == [1]
    assert q.stats()['enqueued'] == 2


@test
def unique_batch_with_one_key_twice_enqueues_the_first_and_refuses_the_second():
    q = fresh('uq2')
    got = enqueue_unique(q, [('a', '1', 0), ('b', '2', 0), ('c', '3', 0)], ['k', 'k', 'j'])
    assert got == [1, [2, b'a'], 1], got
    assert lock(q, 'k') == b'a' and lock(q, 'j') == b'c'
    assert not r.exists(q.jk('b'))
    assert r.lrange(q.pending, 0, -1) == [b'c', b'a']
    assert q.stats()['enqueued'] == 2
    # in debounce mode the later one's payload and delay go to the first
    got = enqueue_unique(q, [('d', 'x', 0), ('e', 'y', 5000)], ['m', 'm'], mode='debounce')
    assert got == [1, [3, b'd']], got
    assert q.job('d')['payload'] == b'y' and q.job('d')['status'] == b'delayed'
    assert r.zscore(q.delayed, 'd') is not None and not r.exists(q.jk('e'))


@test
def until_done_is_released_by_ack_and_kept_through_a_retry():
    q = fresh('uq3')
    enqueue_unique(q, [('a', 'x', 0)], ['k'])
    [j] = q.claim(1)
    assert lock(q, 'k') == b'a'  # held while processing
    assert enqueue_unique(q, [('b', 'y', 0)], ['k']) == [[2, b'a']]
    assert q.fail('a', j[3], 'boom', 'retry', 0) == b'pending'
    assert lock(q, 'k') == b'a'  # a retry keeps it
    [j] = q.claim(1)
    assert q.ack([('a', j[3])]) == [1]
    assert lock(q, 'k') is None
    assert enqueue_unique(q, [('b', 'y', 0)], ['k']) == [1]


@test
def until_done_is_released_when_the_job_dies():
    q = fresh('uq4')
    r.hset(q.meta, 'max_attempts', 1)
    enqueue_unique(q, [('f', 'x', 0), ('r', 'x', 0), ('s', 'x', 0)], ['kf', 'kr', 'ks'])
    leases = {j[0]: j for j in q.claim(3, vis=1)}
    assert q.fail('f', leases[b'f'][3], 'boom', 'retry', -1) == b'dead'
    assert lock(q, 'kf') is None
    # settle_claim's fail to dead
    out = q.settle_claim(1, fails=[('s', leases[b's'][3], 'boom', 'dead', 0)])
    assert out[3] == [b'dead'] and lock(q, 'ks') is None
    # reap past max attempts
    wait_ms(2)
    assert q.reap()[1] == 1
    assert q.job('r')['status'] == b'dead' and lock(q, 'kr') is None


@test
def until_started_is_released_at_the_claim():
    q = fresh('uq5')
    enqueue_unique(q, [('a', 'x', 0), ('d', 'x', 1)], ['k', 'kd'], mode='until-started')
    assert enqueue_unique(q, [('b', 'y', 0)], ['k'], mode='until-started') == [[2, b'a']]
    wait_ms(2)
    got = q.claim(5)
    assert sorted(j[0] for j in got) == [b'a', b'd']  # d promoted by the claim
    assert lock(q, 'k') is None and lock(q, 'kd') is None
    assert enqueue_unique(q, [('b', 'y', 0)], ['k'], mode='until-started') == [1]
    # the old job's end leaves the new holder's lock alone (compare-and-delete)
    assert q.ack([('a', got[0][3] if got[0][0] == b'a' else got[1][3])]) == [1]
    assert lock(q, 'k') == b'b'
    # settle_claim's claim part releases too
    out = q.settle_claim(1)
    assert [j[0] for j in out[0]] == [b'b'] and lock(q, 'k') is None


@test
def debounce_replaces_the_waiting_jobs_payload_and_delay():
    q = fresh('uq6')
    assert enqueue_unique(q, [('a', 'v1', 0)], ['k'], mode='debounce') == [1]
    # pending -> delayed
    t0 = now_ms()
    assert enqueue_unique(q, [('b', 'v2', 60000)], ['k'], mode='debounce') == [[3, b'a']]
    h = q.job('a')
    assert h['payload'] == b'v2' and h['status'] == b'delayed'
    assert t0 + 60000 <= int(h['run_at']) == r.zscore(q.delayed, 'a')
    assert r.lrange(q.pending, 0, -1) == [] and not r.exists(q.jk('b'))
    # delayed -> ready now, with a wake marker
    r.delete(q.wake)
    assert enqueue_unique(q, [('c', 'v3', 0)], ['k'], mode='debounce') == [[3, b'a']]
    assert q.job('a')['payload'] == b'v3' and r.zscore(q.delayed, 'a') is None
    assert r.lrange(q.pending, 0, -1) == [b'a'] and r.llen(q.wake) == 1
    assert q.stats()['enqueued'] == 1
    # once claimed, the key is free: a new job
    [j] = q.claim(1)
    assert j[1] == b'v3' and lock(q, 'k') is None
    assert enqueue_unique(q, [('d', 'v4', 0)], ['k'], mode='debounce') == [1]
    # a debounce call meeting an until-done holder that is processing is refused
    enqueue_unique(q, [('e', 'x', 0)], ['busy'])
    q.claim(5)
    assert enqueue_unique(q, [('f', 'x', 0)], ['busy'], mode='debounce') == [[2, b'e']]


@test
def the_window_bounds_the_lock_and_a_replacement_restarts_it():
    q = fresh('uq7')
    enqueue_unique(q, [('a', 'x', 0)], ['k'], for_ms=20)
    assert 0 < r.pttl(q.p + 'unique:k') <= 20
    assert enqueue_unique(q, [('b', 'x', 0)], ['k'], for_ms=20) == [[2, b'a']]
    wait_ms(25)
    assert lock(q, 'k') is None  # the window ran out first: the job still waits
    assert enqueue_unique(q, [('b', 'x', 0)], ['k'], for_ms=60000) == [1]
    # the first job's end leaves b's lock alone
    jobs = {j[0]: j for j in q.claim(2)}
    assert q.ack([('a', jobs[b'a'][3])]) == [1]
    assert lock(q, 'k') == b'b'
    enqueue_unique(q, [('c', 'x', 0)], ['w'], mode='debounce', for_ms=60000)
    r.pexpire(q.p + 'unique:w', 100)
    assert enqueue_unique(q, [('d', 'y', 0)], ['w'], mode='debounce', for_ms=60000) == [[3, b'c']]
    assert r.pttl(q.p + 'unique:w') > 100


@test
def cancel_delete_and_purge_release_the_lock():
    q = fresh('uq8')
    enqueue_unique(q, [('p', 'x', 0), ('d', 'x', 60000), ('x', 'x', 0)], ['kp', 'kd', 'kx'],
                   mode='until-started')
    assert manage(q, 'cancel', 'p') == b'pending' and lock(q, 'kp') is None
    assert manage(q, 'delete', 'd') == b'delayed' and lock(q, 'kd') is None
    assert manage(q, 'delete', 'x') == b'pending' and lock(q, 'kx') is None
    # a cancelled lease ending (until-done): manage cancelled, and reap
    enqueue_unique(q, [('l', 'x', 0), ('m', 'x', 0)], ['kl', 'km'])
    leases = {j[0]: j for j in q.claim(2, vis=1)}
    assert manage(q, 'cancel', 'l') == b'processing' and lock(q, 'kl') == b'l'
    assert q.ev('manage', [q.jk('l')], 'cancelled', 'l', leases[b'l'][3]) == 1
    assert lock(q, 'kl') is None
    assert manage(q, 'cancel', 'm') == b'processing'
    wait_ms(2)
    q.reap()
    assert lock(q, 'km') is None and q.stats()['cancelled'] == 3
    # purge: a dead job's lock (released at its death) is not its successor's
    enqueue_unique(q, [('z', 'x', 0)], ['kz'])
    [j] = q.claim(1)
    q.fail('z', j[3], 'e', 'dead', 0)
    assert enqueue_unique(q, [('z2', 'x', 0)], ['kz']) == [1]
    assert q.purge_ids(['z']) == 1 and lock(q, 'kz') == b'z2'
    # a lock that still names a dead job (written by hand here) goes with its purge
    enqueue_unique(q, [('y', 'x', 0)], ['ky'])
    j = {j[0]: j for j in q.claim(5)}[b'y']
    assert q.fail('y', j[3], 'e', 'dead', 0) == b'dead'
    r.set(q.p + 'unique:ky', 'y')
    assert q.purge_ids(['y']) == 1 and lock(q, 'ky') is None


@test
def a_lock_whose_job_is_gone_or_done_is_taken_over():
    q = fresh('uq9')
    r.set(q.p + 'unique:k', 'ghost')  # names no job
    assert enqueue_unique(q, [('a', 'x', 0)], ['k']) == [1]
    assert lock(q, 'k') == b'a'
    r.hset(q.meta, 'completed_retention_ms', 60000)
    [j] = q.claim(1)
    q.ack([('a', j[3])])
    r.set(q.p + 'unique:k', 'a')  # the done job kept by the retention names it again
    assert enqueue_unique(q, [('b', 'x', 0)], ['k']) == [1]
    assert lock(q, 'k') == b'b'


@test
def hostile_unique_keys_and_bad_blocks_are_refused_before_anything_is_written():
    q = fresh('uq10')
    key = bytes(range(256))
    assert enqueue_unique(q, [('a', 'x', 0)], [key]) == [1]
    assert lock(q, key) == b'a'
    assert enqueue_unique(q, [('b', 'x', 0)], [key]) == [[2, b'a']]
    assert enqueue_unique(q, [('c', 'x', 0)], [b'k' * 1024]) == [1]
    snap = q.snapshot()
    cases = [
        ([b'k' * 1025], 'until-done', 0, 'invalid unique_key: triple 1: expected a key of 1..1024 bytes, got 1025 bytes'),
        ([b''], 'until-done', 0, 'invalid unique_key: triple 1: expected a key of 1..1024 bytes, got 0 bytes'),
        (['k'], 'forever', 0, 'invalid unique_mode'),
        (['k'], 'until-done', -1, 'invalid unique_for_ms'),
        (['k'], 'until-done', '1e3', 'invalid unique_for_ms'),
    ]
    for keys, mode, for_ms, want in cases:
        e = err_of(lambda: enqueue_unique(q, [('d', 'x', 0)], keys, mode, for_ms))
        assert want in e, (want, e)
    # too few keys for the triples
    e = err_of(lambda: q.ev('enqueue', [q.jk('d'), q.jk('e')], 2, 'd', 'x', 0, 'e', 'x', 0,
                            'unique', 'until-done', 0, 'k'))
    assert 'invalid unique' in e, e
    # the options block after the unique block is read as such
    e = err_of(lambda: enqueue_unique(q, [('d', 'x', 0)], ['k2'], options=['options', 'max_attempts', 0]))
    assert 'invalid max_attempts' in e, e
    assert q.snapshot() == snap
    assert enqueue_unique(q, [('d', 'x', 0)], ['k2'], options=['options', 'max_attempts', 3]) == [1]
    assert q.job('d')['max_attempts'] == b'3' and q.job('d')['unique_key'] == b'k2'
    # a wrong-typed lock key is named, nothing written
    r.lpush(q.p + 'unique:wt', 'x')
    snap = q.snapshot()
    e = err_of(lambda: enqueue_unique(q, [('e', 'x', 0)], ['wt']))
    assert 'holds the wrong type' in e and 'unique:wt' in e, e
    assert q.snapshot() == snap
