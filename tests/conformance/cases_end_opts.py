"""The end_opts field (docs/protocol.md, Job hash): a job whose end acts on a field of its
own (unique_key, notify, timeout_ms, visibility_timeout_ms) holds end_opts = 1, written by
enqueue and by a schedule's fire; other jobs do not (max_attempts, backoff, rate_key and
priority are read elsewhere). ack, settle_claim and reap read those fields only for a job
that holds it: a plain job's ack reads the lease's two fields and end_opts in one HMGET."""
from jq import *
from cases_job_timeout import enqueue_with, minute, on_queue_node
from cases_schedule import fire, put, due
from cases_unique import enqueue_unique, lock


def hmget_fields(q):
    """The HMGET calls run on the queue's node since the last CONFIG RESETSTAT."""
    for name, v in r.info('commandstats', **on_queue_node(q)).items():
        if name in ('cmdstat_hmget', 'hmget'):
            return v['calls']
    return 0


@test
def end_opts_marks_exactly_the_jobs_whose_end_reads_their_options():
    q = fresh('eo1')
    q.enqueue([('plain', 'p', 0), ('later', 'p', 60000)])
    for opt, v in [('max_attempts', '3'), ('backoff_initial_ms', '10'), ('rate_key', 'k'),
                   ('priority', '4')]:
        enqueue_with(q, [(opt, 'p', 0)], opt, v)
    for opt, v in [('notify', '60000'), ('timeout_ms', '5000'),
                   ('visibility_timeout_ms', '4000')]:
        enqueue_with(q, [(opt, 'p', 0)], opt, v)
        enqueue_with(q, [(opt + '-delayed', 'p', 60000)], opt, v, 'max_attempts', '2')
    enqueue_unique(q, [('u', 'p', 0)], ['key-u'])
    enqueue_unique(q, [('us', 'p', 60000)], ['key-us'], mode='until-started')
    marked = {k: q.job(k).get('end_opts') for k in
              ['plain', 'later', 'max_attempts', 'backoff_initial_ms', 'rate_key', 'priority',
               'notify', 'timeout_ms', 'visibility_timeout_ms', 'notify-delayed',
               'timeout_ms-delayed', 'visibility_timeout_ms-delayed', 'u', 'us']}
    assert marked == {
        'plain': None, 'later': None, 'max_attempts': None, 'backoff_initial_ms': None,
        'rate_key': None, 'priority': None,
        'notify': b'1', 'timeout_ms': b'1', 'visibility_timeout_ms': b'1',
        'notify-delayed': b'1', 'timeout_ms-delayed': b'1',
        'visibility_timeout_ms-delayed': b'1', 'u': b'1', 'us': b'1'}, marked


@test
def a_schedules_jobs_carry_end_opts_when_its_options_ask_for_it():
    q = fresh('eo2')
    put(q, 'plain', 'every', '1000', '', 'skip', '0', 'pay', '0', 'options', 'max_attempts', '2')
    put(q, 'timed', 'every', '1000', '', 'skip', '0', 'pay', '0', 'options', 'timeout_ms', '900')
    t = max(due(q, 'plain'), due(q, 'timed'))
    wait_ms(t - now_ms() + 1)
    assert fire(q, ('plain', t), ('timed', t)) == [1, 1]
    assert q.job(f'sched:plain:{t}').get('end_opts') is None
    assert q.job(f'sched:timed:{t}')['end_opts'] == b'1'
    # the schedule's stored options stay as they were given
    import json
    assert json.loads(r.hget(q.p + 'schedules', 'timed'))['options'] == ['timeout_ms', '900']


@test
def ack_reads_the_options_of_a_job_only_when_it_holds_end_opts():
    q = fresh('eo3')
    minute(q)
    q.enqueue([('plain', 'p', 0)])
    enqueue_unique(q, [('u', 'p', 0)], ['key-u'], options=('options', 'notify', '60000'))
    jobs = {j[0].decode(): j for j in q.claim(2)}
    r.config_resetstat(**on_queue_node(q))
    assert q.ack([('plain', jobs['plain'][3])]) == [1]
    # the lease's fields and end_opts in one HMGET, meta's retention in another
    assert hmget_fields(q) == 2
    r.config_resetstat(**on_queue_node(q))
    assert q.ack([('u', jobs['u'][3])]) == [1]
    assert hmget_fields(q) == 3
    # its end did what its options say: the lock released, the end announced
    assert lock(q, 'key-u') is None
    assert [e[1][b'id'] for e in r.xrange(q.p + 'done')] == [b'u']


@test
def reap_reads_the_options_of_a_job_only_when_it_holds_end_opts():
    q = fresh('eo4')
    minute(q)
    q.enqueue([('plain', 'p', 0)])
    enqueue_unique(q, [('u', 'p', 0)], ['key-u'], options=('options', 'notify', '60000'))
    r.hset(q.meta, 'max_attempts', '1')
    q.claim(2, vis=1)
    wait_ms(2)
    r.config_resetstat(**on_queue_node(q))
    q.reap()
    # meta's settings in one HMGET; each job's fields and end_opts in one; the end fields
    # of u, which holds end_opts, in one more
    assert hmget_fields(q) == 4
    assert q.job('plain')['status'] == b'dead' and q.job('u')['status'] == b'dead'
    # u's end did what its options say: the lock released, the death announced
    assert lock(q, 'key-u') is None
    assert [e[1][b'id'] for e in r.xrange(q.p + 'done')] == [b'u']
