"""Per-job options: enqueue's optional options block after the triples writes a job's own
max_attempts and backoff_* into its hash; fail, settle_claim and reap read them in place of
meta's for that job. A bad block is refused naming what is wrong, writing nothing.
"""
from jq import *


def enqueue_with(q, jobs, *options):
    args = []
    for j in jobs:
        args += list(j)
    return q.ev('enqueue', [q.jk(j[0]) for j in jobs], len(jobs), *args, 'options', *options)


def meta(q, **fields):
    r.hset(q.meta, mapping=fields)


@test
def enqueue_writes_the_options_into_each_new_job():
    q = fresh('jo1')
    assert enqueue_with(q, [('a', 'p', 0), ('b', 'p', 5000)], 'max_attempts', '3',
                        'backoff_initial_ms', '10', 'backoff_max_ms', '20',
                        'backoff_multiplier', '1.5') == [1, 1]
    for id in ('a', 'b'):
        j = q.job(id)
        assert (j['max_attempts'], j['backoff_initial_ms'], j['backoff_max_ms'],
                j['backoff_multiplier']) == (b'3', b'10', b'20', b'1.5'), j
    assert q.job('b')['status'] == b'delayed'
    # an id already there keeps its hash as it was
    assert enqueue_with(q, [('a', 'q', 0)], 'max_attempts', '9') == [0]
    assert q.job('a')['max_attempts'] == b'3'
    # without the block: no option fields
    assert q.enqueue([('c', 'p', 0)]) == [1]
    assert 'max_attempts' not in q.job('c')


@test
def fail_uses_the_jobs_max_attempts_and_backoff():
    q = fresh('jo2')
    meta(q, max_attempts=5, backoff_initial_ms=1, backoff_max_ms=1)
    enqueue_with(q, [('once', 'p', 0)], 'max_attempts', '1')
    enqueue_with(q, [('slow', 'p', 0)], 'backoff_initial_ms', '3600000',
                 'backoff_max_ms', '7200000')
    jobs = q.claim(2)
    by_id = {j[0]: j[3] for j in jobs}
    assert q.fail('once', by_id[b'once']) == b'dead'
    before = now_ms()
    assert q.fail('slow', by_id[b'slow']) == b'delayed'
    run_at = int(q.job('slow')['run_at'])
    assert before + 3600000 <= run_at < before + 3700000, (before, run_at)
    # more attempts than meta's
    q = fresh('jo2b')
    meta(q, max_attempts=1, backoff_initial_ms=0, backoff_max_ms=0)
    enqueue_with(q, [('three', 'p', 0)], 'max_attempts', '3')
    outcomes = []
    for _ in range(3):
        j = q.claim(1)[0]
        outcomes.append(q.fail('three', j[3]))
    assert outcomes == [b'pending', b'pending', b'dead'], outcomes


@test
def settle_claim_uses_the_jobs_max_attempts_and_backoff():
    q = fresh('jo3')
    meta(q, max_attempts=5, backoff_initial_ms=1, backoff_max_ms=1)
    enqueue_with(q, [('once', 'p', 0)], 'max_attempts', '1')
    enqueue_with(q, [('slow', 'p', 0)], 'backoff_initial_ms', '3600000',
                 'backoff_max_ms', '7200000')
    q.enqueue([('plain', 'p', 0)])
    jobs = q.claim(3)
    tok = {j[0]: j[3] for j in jobs}
    before = now_ms()
    out = q.settle_claim(1, fails=[('once', tok[b'once'], 'e', 'retry', -1),
                                   ('slow', tok[b'slow'], 'e', 'retry', -1),
                                   ('plain', tok[b'plain'], 'e', 'retry', -1)])
    assert out[3] == [b'dead', b'delayed', b'delayed'], out
    assert int(q.job('slow')['run_at']) >= before + 3600000
    assert int(q.job('plain')['run_at']) < before + 1000


@test
def reap_uses_the_jobs_max_attempts():
    q = fresh('jo4')
    meta(q, max_attempts=5)
    enqueue_with(q, [('once', 'p', 0)], 'max_attempts', '1')
    q.enqueue([('plain', 'p', 0)])
    q.claim(2, vis=1)
    import time
    time.sleep(0.01)
    assert q.reap() == [1, 1, 0]
    assert q.job('once')['status'] == b'dead'
    assert q.job('plain').get('status', b'pending') == b'pending'


@test
def a_stored_option_that_is_no_such_value_counts_as_absent():
    q = fresh('jo5')
    meta(q, max_attempts=1)
    q.enqueue([('j', 'p', 0)])
    r.hset(q.jk('j'), 'max_attempts', '-inf')
    j = q.claim(1)[0]
    assert q.fail('j', j[3]) == b'dead'


@test
def bad_option_blocks_are_refused_writing_nothing():
    q = fresh('jo6')
    cases = [
        ((), 'jobqueue: invalid options: expected name, value pairs after "options", got 0'),
        (('max_attempts',), 'jobqueue: invalid options: expected name, value pairs'),
        (('lifo', '1'), 'jobqueue: invalid options: "lifo" is not an option'),
        (('max_attempts', '1', 'max_attempts', '2'),
         'jobqueue: invalid options: "max_attempts" is given twice'),
        (('max_attempts', '0'), 'jobqueue: invalid max_attempts: expected an integer 1..1000000, got "0"'),
        (('max_attempts', '1.5'), 'jobqueue: invalid max_attempts'),
        (('backoff_initial_ms', '-1'), 'jobqueue: invalid backoff_initial_ms: expected an integer 0..10^15 ms'),
        (('backoff_multiplier', '0.5'), 'jobqueue: invalid backoff_multiplier: expected a decimal number 1..1000'),
        (('backoff_multiplier', 'nan'), 'jobqueue: invalid backoff_multiplier'),
        (('backoff_initial_ms', '10', 'backoff_max_ms', '5'),
         'jobqueue: invalid backoff_max_ms: expected at least backoff_initial_ms (10), got "5"'),
    ]
    for options, want in cases:
        snap = q.snapshot()
        m = err_of(lambda: enqueue_with(q, [('j', 'p', 0)], *options))
        assert m.startswith(want), (options, m)
        assert q.snapshot() == snap, options


@test
def enqueue_at_an_absolute_time_reads_it_against_the_redis_clock():
    q = fresh('jo7')
    t = now_ms()
    assert q.enqueue([('later', 'p', '@' + str(t + 3600000)), ('past', 'p', '@' + str(t - 1000)),
                      ('zero', 'p', '@0')]) == [1, 1, 1]
    assert q.job('later')['status'] == b'delayed'
    assert int(q.job('later')['run_at']) == t + 3600000
    assert r.zscore(q.delayed, 'later') == t + 3600000
    assert 'status' not in q.job('past') and 'status' not in q.job('zero')
    assert sorted(r.lrange(q.pending, 0, -1)) == [b'past', b'zero']
    for bad in ['@', '@-1', '@1e3', '@' + str(10 ** 15 + 1), '@ 5']:
        snap = q.snapshot()
        m = err_of(lambda: q.enqueue([('b', 'p', bad)]))
        assert m.startswith('jobqueue: invalid delay_ms: triple 1: expected @ and a time of '
                            '0..10^15 ms, got'), (bad, m)
        assert q.snapshot() == snap, bad
