"""A job's own maximum run time and lease length: enqueue's options block takes
timeout_ms and visibility_timeout_ms (integers 1..10^15) into the job's hash; claim,
settle_claim and extend lease the job for its own visibility whatever the call asks;
claim answers both after lease_until in the job's entry (7 entries instead of 5), and
settle_claim in one array after its flat leases, only when a leased job has them. A
stored value that is not valid counts as absent. Bad input is refused, writing nothing.
"""
from jq import *


def enqueue_with(q, jobs, *options):
    args = []
    for j in jobs:
        args += list(j)
    return q.ev('enqueue', [q.jk(j[0]) for j in jobs], len(jobs), *args, 'options', *options)


def minute(q):
    r.hset(q.meta, mapping={'visibility_timeout_ms': 60000})


def on_queue_node(q):
    """The node holding the queue's slot, for commands sent to one node (on a Cluster)."""
    return {'target_nodes': r.get_node_from_key(q.meta)} if CLUSTER else {}


def commands_run(q):
    """Every command the queue's node ran since the last reset, scripts' own included."""
    stats = r.info('commandstats', **on_queue_node(q))
    return sum(v['calls'] for k, v in stats.items()
               if k not in ('cmdstat_evalsha', 'cmdstat_info', 'cmdstat_config'))


@test
def enqueue_writes_timeout_and_visibility_and_refuses_bad_ones():
    q = fresh('jt1')
    assert enqueue_with(q, [('a', 'p', 0)], 'timeout_ms', '120000',
                        'visibility_timeout_ms', '30000') == [1]
    j = q.job('a')
    assert (j['timeout_ms'], j['visibility_timeout_ms']) == (b'120000', b'30000'), j
    before = q.snapshot()
    for name, value, says in [
            ('timeout_ms', '0', 'invalid timeout_ms: expected an integer 1..10^15 ms, got "0"'),
            ('timeout_ms', '-5', 'invalid timeout_ms'),
            ('visibility_timeout_ms', '1e3', 'invalid visibility_timeout_ms'),
            ('visibility_timeout_ms', '1.5', 'invalid visibility_timeout_ms'),
            ('visibility_timeout_ms', 'soon', 'invalid visibility_timeout_ms'),
            ('visibility_timeout_ms', '1000000000000001', 'invalid visibility_timeout_ms'),
            ('timeout', '5', 'invalid options: "timeout" is not an option')]:
        e = err_of(lambda: enqueue_with(q, [('b', 'p', 0)], name, value))
        assert says in e, (name, value, e)
    e = err_of(lambda: enqueue_with(q, [('b', 'p', 0)], 'timeout_ms', '5', 'timeout_ms', '6'))
    assert 'is given twice' in e, e
    assert q.snapshot() == before, 'nothing written'


@test
def claim_leases_each_job_for_its_own_visibility_and_answers_its_options():
    q = fresh('jt2')
    minute(q)
    q.enqueue([('plain', 'p', 0)])
    enqueue_with(q, [('vis', 'p', 0)], 'visibility_timeout_ms', '2000')
    enqueue_with(q, [('tmo', 'p', 0)], 'timeout_ms', '5000')
    enqueue_with(q, [('both', 'p', 0)], 'timeout_ms', '7000', 'visibility_timeout_ms', '3000')
    request = 'req-jt2'
    jobs, more = q.claim_reply(4, vis=45000, request=request)
    by = {j[0]: j for j in jobs}
    assert sorted(by) == [b'both', b'plain', b'tmo', b'vis'], jobs
    claimed_at = parse_token(by[b'plain'][3])[0]
    # plain: 5 entries, the caller's 45 s; the others 7, the own visibility winning
    assert len(by[b'plain']) == 5 and by[b'plain'][4] == claimed_at + 45000
    assert by[b'vis'][4:] == [claimed_at + 2000, 0, 2000], by[b'vis']
    assert by[b'tmo'][4:] == [claimed_at + 45000, 5000, 0], by[b'tmo']
    assert by[b'both'][4:] == [claimed_at + 3000, 7000, 3000], by[b'both']
    for id, j in by.items():
        assert int(r.zscore(q.processing, id)) == j[4], id
        assert int(q.job(id.decode())['lease_until']) == j[4], id
    # the record lives the longest lease used (45 s here)
    assert 40000 < r.pttl(q.claimreq(request)) <= 45000
    # a retry is answered the same
    again, _ = q.claim_reply(4, vis=45000, request=request)
    assert sorted(again) == sorted(jobs), (again, jobs)
    # with meta's visibility (0): the same rule
    q.enqueue([('plain2', 'p', 0)])
    enqueue_with(q, [('vis2', 'p', 0)], 'visibility_timeout_ms', '1500')
    jobs = q.claim(2)
    by = {j[0]: j for j in jobs}
    at = parse_token(by[b'plain2'][3])[0]
    assert by[b'plain2'][4] == at + 60000 and by[b'vis2'][4] == at + 1500, jobs


@test
def a_claim_of_jobs_that_all_have_their_own_visibility_records_the_longest():
    q = fresh('jt3')
    minute(q)
    enqueue_with(q, [('a', 'p', 0)], 'visibility_timeout_ms', '1500')
    enqueue_with(q, [('b', 'p', 0)], 'visibility_timeout_ms', '2500')
    q.claim(2, request='req-jt3')
    assert 1500 < r.pttl(q.claimreq('req-jt3')) <= 2500  # the longer one's, not the shorter


@test
def a_promoted_delayed_job_keeps_its_options():
    q = fresh('jt4')
    minute(q)
    enqueue_with(q, [('d', 'p', 1)], 'timeout_ms', '900', 'visibility_timeout_ms', '1200')
    wait_ms(2)
    [job] = q.claim(1)
    at = parse_token(job[3])[0]
    assert job[0] == b'd' and job[4:] == [at + 1200, 900, 1200], job


@test
def settle_claim_answers_the_options_in_one_array_after_its_leases():
    q = fresh('jt5')
    minute(q)
    q.enqueue([('p1', 'p', 0)])
    enqueue_with(q, [('o1', 'p', 0)], 'timeout_ms', '4000', 'visibility_timeout_ms', '2000')
    q.enqueue([('p2', 'p', 0)])
    request = 'req-jt5'
    flat = q.settle_claim_flat(3, request=request)
    # 2 + a + f + 4 per job, and one array more: timeout, visibility per leased job
    assert len(flat) == 2 + 4 * 3 + 1, flat
    ids = flat[2:14:4]
    assert ids == [b'p1', b'o1', b'p2'], flat
    assert flat[-1] == [0, 0, 4000, 2000, 0, 0], flat
    at = parse_token(flat[1])[0]
    assert flat[2 + 4 + 3] == at + 2000 and flat[2 + 3] == at + 60000, flat
    # a retry answers the same, the array included
    assert q.settle_claim_flat(3, request=request) == flat
    # the leases acked, the next claim takes plain jobs only: no array
    q.enqueue([('p3', 'p', 0)])
    acks = [(i.decode(), flat[1]) for i in ids]
    flat2 = q.settle_claim_flat(2, acks=acks)
    assert len(flat2) == 2 + 3 + 4, flat2
    assert flat2[2:5] == [1, 1, 1] and flat2[5] == b'p3', flat2
    # the parsed form (jq.py) gives each job its options as claim does
    enqueue_with(q, [('o2', 'p', 0)], 'timeout_ms', '3000')
    jobs = q.settle_claim(1, acks=[('p3', flat2[1])])[0]
    assert len(jobs) == 1 and jobs[0][0] == b'o2' and jobs[0][5:] == [3000, 0], jobs


@test
def extend_renews_a_job_for_its_own_visibility_whatever_ms():
    q = fresh('jt6')
    minute(q)
    q.enqueue([('plain', 'p', 0)])
    enqueue_with(q, [('own', 'p', 0)], 'visibility_timeout_ms', '2000')
    jobs = q.claim(2)
    tok = {j[0].decode(): j[3] for j in jobs}
    for ms in (0, 45000):
        before = now_ms()
        plain, own = q.extend(ms, [('plain', tok['plain']), ('own', tok['own'])])
        after = now_ms()
        want = ms or 60000
        assert before + want <= plain <= after + want, (ms, plain)
        assert before + 2000 <= own <= after + 2000, (ms, own)
        assert int(r.zscore(q.processing, 'own')) == own
        assert int(q.job('own')['lease_until']) == own


@test
def a_stored_option_that_is_not_valid_counts_as_absent():
    q = fresh('jt7')
    minute(q)
    q.enqueue([('odd', 'p', 0)])
    r.hset(q.jk('odd'), mapping={'visibility_timeout_ms': '-inf', 'timeout_ms': '1e3'})
    [job] = q.claim(1)
    at = parse_token(job[3])[0]
    assert len(job) == 5 and job[4] == at + 60000, job
    [until] = q.extend(0, [('odd', job[3])])
    assert until >= at + 60000


@test
def reap_ends_a_lease_by_its_own_visibility():
    q = fresh('jt8')
    minute(q)
    enqueue_with(q, [('short', 'p', 0)], 'visibility_timeout_ms', '50')
    q.enqueue([('long', 'p', 0)])
    q.claim(2)
    wait_ms(60)
    assert q.reap() == [1, 0, 0]
    assert r.lrange(q.pending, 0, -1) == [b'short']
    assert q.job('long')['status'] == b'processing'


@test
def options_cost_no_command_on_the_claim_and_ack_path():
    # claim then ack of one job: a plain job costs what it did before options existed,
    # less the HMGET of meta's visibility, which claim now reads with the rest of meta,
    # and the DEL ack sent for a claim lease's token, which names no record (24 commands
    # here). A job with options is read once more by ack (its end_opts says
    # so: one HMGET of the fields its end reads) and counts its processing time also in
    # own_h:<b> (one HINCRBY), whether it has its own visibility or not.
    counts = []
    for tag, options in [('jt9a', ()), ('jt9b', ('timeout_ms', '5000')),
                         ('jt9c', ('timeout_ms', '5000', 'visibility_timeout_ms', '4000'))]:
        q = fresh(tag)
        minute(q)
        if options:
            enqueue_with(q, [('j', 'p', 0)], *options)
        else:
            q.enqueue([('j', 'p', 0)])
        r.config_resetstat(**on_queue_node(q))
        [job] = q.claim(1)
        assert q.ack([('j', job[3])]) == [1]
        counts.append(commands_run(q))
    assert counts[0] == 24 and counts[1] == counts[0] + 2 and counts[2] == counts[0] + 2, counts


def acks(stats, prefix):
    """The acks of a histogram (h: or own_h:), whatever their buckets."""
    return sum(v for k, v in stats.items() if k.startswith(prefix))


@test
def jobs_with_their_own_options_are_also_counted_apart():
    # what the queue's visibility tuning (auto) leaves out: own_h:<b>, own_reaped, own_stale
    q = fresh('jt10')
    minute(q)
    r.hset(q.meta, 'completed_retention_ms', 60000)  # acked hashes stay: later calls are stale
    q.enqueue([('plain', 'p', 0)])
    enqueue_with(q, [('own', 'p', 0)], 'timeout_ms', '5000')
    enqueue_with(q, [('vis', 'p', 0)], 'visibility_timeout_ms', '30')
    enqueue_with(q, [('s1', 'p', 0), ('s2', 'p', 0)], 'timeout_ms', '5000')
    tok = {j[0].decode(): j[3] for j in q.claim(5)}
    assert q.ack([('plain', tok['plain']), ('own', tok['own'])]) == [1, 1]
    st = q.stats()
    assert (acks(st, 'h:'), acks(st, 'own_h:')) == (2, 1), st
    # stale calls of such jobs: ack, extend, fail, settle_claim's ack and fail
    assert q.ack([('own', tok['own'])]) == [0]
    assert q.extend(0, [('own', tok['own'])]) == [0]
    assert q.fail('own', tok['own']) == b'stale'
    assert q.ack([('plain', tok['plain'])]) == [0]
    flat = q.settle_claim_flat(1, acks=[('own', tok['own'])],
                               fails=[('own', tok['own'], 'e', 'retry', -1)])
    assert flat[2:4] == [0, b'stale'], flat
    st = q.stats()
    assert (st['stale'], st['own_stale']) == (6, 5), st
    # settle_claim's acks of such jobs
    flat = q.settle_claim_flat(1, acks=[('s1', tok['s1']), ('s2', tok['s2'])])
    assert flat[2:4] == [1, 1], flat
    st = q.stats()
    assert (acks(st, 'h:'), acks(st, 'own_h:')) == (4, 3), st
    # an expired lease of such a job
    wait_ms(40)
    assert q.reap()[0] == 1
    st = q.stats()
    assert (st['reaped'], st['own_reaped']) == (1, 1), st
