"""Schedules (lua/schedule.lua): put, rm, pause and resume keep a named rule in
P:{T}:schedules and its next tick in P:{T}:schedule_due; fire makes exactly one job per
tick, with id sched:<name>:<tick>, and follows the missed-tick policy for a tick late by
its interval or more. Bad arguments are refused naming what is wrong, writing nothing.
"""
from jq import *


def keys(q):
    return q.K + [q.p + 'schedules', q.p + 'schedule_due']


def sched(q, *args, job_keys=()):
    return r.evalsha(SHAS['schedule'], 9 + len(job_keys), *keys(q), *job_keys, q.jp, *args)


def put(q, name, kind='every', spec='1000', tz='', missed='skip', paused='0',
        payload='p', first='0', *options):
    return sched(q, 'put', name, kind, spec, tz, missed, paused, payload, first, *options)


def due(q, name):
    s = r.zscore(q.p + 'schedule_due', name)
    return None if s is None else int(s)


def fire(q, *quads):
    """quads: (name, tick[, next, after_now])"""
    args, jk = [], []
    for qd in quads:
        name, tick = qd[0], qd[1]
        n1, n2 = (qd[2], qd[3]) if len(qd) > 2 else (0, 0)
        args += [name, tick, n1, n2]
        jk.append(q.jk(f'sched:{name}:{tick}'))
    return sched(q, 'fire', len(quads), *args, job_keys=jk)


def rule(q, name):
    import json
    return json.loads(r.hget(q.p + 'schedules', name))


@test
def put_stores_the_rule_and_an_aligned_next_tick():
    q = fresh('sc1')
    before = now_ms()
    assert put(q, 's', 'every', '1000', '', 'once', '0', b'\x00\xffhi', '0',
               'options', 'max_attempts', '3') == 1
    t = due(q, 's')
    assert t % 1000 == 0 and before < t <= now_ms() + 1000, (before, t)
    ru = rule(q, 's')
    assert (ru['kind'], ru['spec'], ru['missed'], ru['paused'], ru['payload'],
            ru['options']) == ('every', '1000', 'once', '0', '00ff6869', ['max_attempts', '3'])
    # the same rule again: unchanged, next tick kept
    assert put(q, 's', 'every', '1000', '', 'once', '0', b'\x00\xffhi', '0',
               'options', 'max_attempts', '3') == 0
    assert due(q, 's') == t
    # changed: 2; cron takes the client's first tick
    assert put(q, 's', 'cron', '0 3 * * *', 'Europe/Paris', 'skip', '0', 'x', '4102444800000') == 2
    assert due(q, 's') == 4102444800000
    # paused: no next tick
    assert put(q, 'p', paused='1') == 1
    assert due(q, 'p') is None


@test
def fire_makes_one_job_per_tick_and_advances():
    q = fresh('sc2')
    put(q, 's', 'every', '1000', '', 'skip', '0', 'pay', '0', 'options', 'max_attempts', '2')
    t = due(q, 's')
    wait_ms(t - now_ms() + 1)
    assert fire(q, ('s', t)) == [1]
    jid = f'sched:s:{t}'
    assert r.lrange(q.pending, 0, -1) == [jid.encode()]
    j = q.job(jid)
    assert (j['payload'], j['schedule'], j['max_attempts']) == (b'pay', b's', b'2'), j
    assert due(q, 's') == t + 1000
    assert rule(q, 's')['last_tick'] == str(t) and rule(q, 's')['last_job'] == jid
    assert r.hget(q.stats_key, 'scheduled') == b'1' and r.hget(q.stats_key, 'enqueued') == b'1'
    # a twin with the same tick: the due time moved on, nothing happens
    assert fire(q, ('s', t)) == [0]
    assert r.llen(q.pending) == 1
    # the job existed already (an earlier try whose due write was undone): 3, no second job
    r.zadd(q.p + 'schedule_due', {'s': t})
    assert fire(q, ('s', t)) == [3]
    assert r.llen(q.pending) == 1


@test
def a_tick_late_by_its_interval_follows_the_missed_policy():
    for missed, want, jobs in (('skip', 2, 0), ('once', 1, 1)):
        q = fresh('sc3' + missed)
        put(q, 's', 'every', '1000', '', missed)
        t = due(q, 's') - 5000  # five ticks missed
        r.zadd(q.p + 'schedule_due', {'s': t})
        assert fire(q, ('s', t)) == [want], missed
        assert r.llen(q.pending) == jobs, missed
        n = now_ms()
        assert n < due(q, 's') <= n + 1000 and due(q, 's') % 1000 == 0
        if jobs:
            assert r.lrange(q.pending, 0, -1) == [f'sched:s:{t}'.encode()]


@test
def cron_ticks_come_from_the_client():
    q = fresh('sc4')
    put(q, 'c', 'cron', '* * * * * *', 'UTC', 'skip', '0', 'p', '1')
    n = now_ms()
    t = n - 500
    r.zadd(q.p + 'schedule_due', {'c': t})
    # on time (now < next): fired, due := next
    assert fire(q, ('c', t, n + 500, n + 700)) == [1]
    assert due(q, 'c') == n + 500
    # late (now >= next): skip, due := the first tick after now
    r.zadd(q.p + 'schedule_due', {'c': t})
    assert fire(q, ('c', t, t + 1, n + 900)) == [2]
    assert due(q, 'c') == n + 900


@test
def pause_resume_and_rm():
    q = fresh('sc5')
    put(q, 's')
    assert sched(q, 'pause', 's') == 1
    assert sched(q, 'pause', 's') == 0
    assert due(q, 's') is None and rule(q, 's')['paused'] == '1'
    assert sched(q, 'pause', 'nope') == -1
    assert sched(q, 'resume', 's', '0') == 1
    assert due(q, 's') > now_ms() - 1
    assert sched(q, 'resume', 's', '0') == 0
    put(q, 'c', 'cron', '0 3 * * *', 'UTC', 'skip', '1', 'p', '1')
    assert 'invalid tick' in err_of(lambda: sched(q, 'resume', 'c', '0'))
    assert sched(q, 'resume', 'c', '99') == 1 and due(q, 'c') == 99
    assert sched(q, 'rm', 's') == 1
    assert sched(q, 'rm', 's') == 0
    assert due(q, 's') is None and r.hget(q.p + 'schedules', 's') is None


@test
def bad_arguments_are_named_and_write_nothing():
    q = fresh('sc6')
    before = q.snapshot()
    cases = [
        (lambda: put(q, 'a b'), 'invalid schedule'),
        (lambda: put(q, 's', 'hourly'), 'invalid kind'),
        (lambda: put(q, 's', 'every', '0'), 'invalid every'),
        (lambda: put(q, 's', 'every', '1000', 'UTC'), 'invalid tz'),
        (lambda: put(q, 's', 'cron', '0 3 * * *', ''), 'invalid tz'),
        (lambda: put(q, 's', 'cron', '0 3 * * *', 'UTC', 'skip', '0', 'p', '0'), 'invalid tick'),
        (lambda: put(q, 's', missed='all'), 'invalid missed'),
        (lambda: put(q, 's', paused='yes'), 'invalid paused'),
        (lambda: put(q, 's', 'every', '1000', '', 'skip', '0', 'p', '0', 'options',
                     'max_attempts', '0'), 'invalid max_attempts'),
        (lambda: put(q, 's', 'every', '1000', '', 'skip', '0', 'p', '0', 'extra'), 'invalid options'),
        (lambda: sched(q, 'explode'), 'invalid action'),
        (lambda: sched(q, 'fire', '0'), 'invalid n'),
        (lambda: sched(q, 'fire', '1', 's', '1000', '0', '0'), 'invalid keys'),
        (lambda: sched(q, 'fire', '1', 's', '1000', '0', '0', job_keys=[q.jk('x')]), 'invalid keys'),
        (lambda: sched(q, 'fire', '1', 's', 'soon', '0', '0', job_keys=[q.jk('sched:s:soon')]),
         'invalid tick'),
    ]
    for fn, want in cases:
        e = err_of(fn)
        assert want in e, (want, e)
    assert q.snapshot() == before
    # a wrong-typed schedules key is named
    r.set(q.p + 'schedules', 'x')
    assert 'wrong type' in err_of(lambda: put(q, 's'))
    r.delete(q.p + 'schedules')


@test
def a_schedule_that_starts_running_pushes_one_wake_marker():
    # An idle worker's schedule firer sleeps while no schedule runs; the marker wakes a
    # worker, whose claim finds no job, and it wakes its firer.
    q = fresh('sc7')
    assert put(q, 's') == 1 and r.llen(q.wake) == 1
    assert put(q, 's') == 0 and r.llen(q.wake) == 1           # unchanged: none
    assert put(q, 's', spec='2000') == 2 and r.llen(q.wake) == 2  # changed
    assert put(q, 'p', paused='1') == 1 and r.llen(q.wake) == 2   # paused: none
    assert sched(q, 'pause', 's') == 1 and r.llen(q.wake) == 2
    assert put(q, 's', spec='3000', paused='1') == 2 and r.llen(q.wake) == 2
    assert sched(q, 'resume', 's', '0') == 1 and r.llen(q.wake) == 3
    assert sched(q, 'resume', 's', '0') == 0 and r.llen(q.wake) == 3
    assert sched(q, 'rm', 's') == 1 and r.llen(q.wake) == 3
    assert q.claim(1) == [] and r.llen(q.wake) == 0           # claim consumes them
    # trimmed to the 1024 newest like every push
    r.rpush(q.wake, *(['1'] * 1024))
    assert put(q, 't') == 1 and r.llen(q.wake) == 1024
    # a wrong-typed wake key is named, and the rule is not written
    r.delete(q.wake)
    r.set(q.wake, 'x')
    assert 'wrong type' in err_of(lambda: put(q, 'u'))
    assert r.hget(q.p + 'schedules', 'u') is None
    r.delete(q.wake)
