"""Request records of claim and settle_claim: a record answers only the retry of its own
call (the same worker, the same arguments), and lives no longer than the retry window
(60 s at most, the visibility when shorter); a call that ends a lease made by
settle_claim deletes that call's record."""
from jq import *


def record_keys(q):
    pattern = q.claimreq('*').replace('{', '\\{').replace('}', '\\}')
    return sorted(r.scan_iter(match=pattern, count=1000))


@test
def a_claim_record_answers_only_its_worker_and_arguments():
    q = fresh('recw')
    q.enqueue([('a', 'pa', 0), ('b', 'pb', 0)])
    first = q.claim_reply(1, worker='w1', vis=60000, request='R')
    assert [j[0] for j in first[0]] == [b'a'], first
    snap = q.snapshot()
    # another worker sending the same request id: refused, nothing changed
    m = err_of(lambda: q.claim_reply(1, worker='w2', vis=60000, request='R'))
    assert m.startswith('jobqueue: invalid request: ') and 'worker' in m, m
    assert q.snapshot() == snap, 'a refused call changes nothing'
    # the same worker with other arguments (count, visibility): refused
    for n, vis in ((2, 60000), (1, 0), (1, 59999)):
        m = err_of(lambda: q.claim_reply(n, worker='w1', vis=vis, request='R'))
        assert m.startswith('jobqueue: invalid request: ') and 'arguments' in m, (n, vis, m)
        assert q.snapshot() == snap
    assert 'replayed' not in q.stats()
    # the call itself again (fresh slot tokens): the recorded lease
    assert q.claim_reply(1, worker='w1', vis=60000, request='R') == first
    assert q.stats()['replayed'] == 1


@test
def a_settle_claim_record_answers_only_its_worker_and_arguments():
    q = fresh('recs')
    q.enqueue([('x', 'px', 0), ('y', 'py', 0), ('a', 'pa', 0)])
    tx = q.claim(1, worker='w1', tokens=['tx'])[0][3]
    ty = q.claim(1, worker='w2', tokens=['ty'])[0][3]
    first = q.settle_claim(1, acks=[('x', tx)], worker='w1', vis=60000, request='R')
    assert first[2] == [1] and [j[0] for j in first[0]] == [b'a'], first
    snap = q.snapshot()
    # w2 reusing w1's request id for its own ack: before, it was answered "acked" for y
    # (which stayed in processing) and given w1's lease of a under w1's token
    m = err_of(lambda: q.settle_claim(1, acks=[('y', ty)], worker='w2', vis=60000,
                                      request='R'))
    assert m.startswith('jobqueue: invalid request: ') and 'worker' in m, m
    assert q.snapshot() == snap, 'a refused call changes nothing'
    assert q.job('y')['status'] == b'processing' and q.job('y')['claim_token'] == ty
    # the same worker with other settles, count or visibility: refused
    for call in (dict(acks=[('y', ty)]), dict(acks=[('x', tx)], n=2),
                 dict(acks=[('x', tx)], vis=0), dict(acks=[('x', tx + b'!')]),
                 dict(acks=[], fails=[('x', tx, 'e', 'retry', 0)])):
        call.setdefault('n', 1)
        call.setdefault('vis', 60000)
        m = err_of(lambda: q.settle_claim(worker='w1', request='R', **call))
        assert m.startswith('jobqueue: invalid request: ') and 'arguments' in m, (call, m)
        assert q.snapshot() == snap
    # the call itself again: its recorded answer
    again = q.settle_claim(1, acks=[('x', tx)], worker='w1', vis=60000, request='R')
    assert again == first and q.stats()['replayed'] == 1


@test
def a_request_id_of_the_other_script_is_refused():
    q = fresh('recx')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    q.claim(1, worker='w', vis=60000, request='C')
    q.settle_claim(1, worker='w', vis=60000, request='S')
    snap = q.snapshot()
    m = err_of(lambda: q.settle_claim(1, worker='w', vis=60000, request='C'))
    assert m.startswith('jobqueue: invalid request: ') and 'claim' in m, m
    m = err_of(lambda: q.claim_reply(1, worker='w', vis=60000, request='S'))
    assert m.startswith('jobqueue: invalid request: ') and 'settle_claim' in m, m
    assert q.snapshot() == snap


@test
def a_record_lives_the_retry_window_at_most():
    q = fresh('recl')
    q.enqueue([(x, 'p', 0) for x in 'abcd'])
    hour = 3600 * 1000
    q.claim(1, vis=hour, request='c1')
    q.settle_claim(1, vis=hour, request='s1')
    for req in ('c1', 's1'):
        ttl = r.pttl(q.claimreq(req))
        assert 55000 < ttl <= 60000, (req, ttl)
    # the visibility when it is shorter: the record ends with the leases
    q.claim(1, vis=5000, request='c2')
    q.settle_claim(1, vis=5000, request='s2')
    for req in ('c2', 's2'):
        ttl = r.pttl(q.claimreq(req))
        assert 0 < ttl <= 5000, (req, ttl)
    # the lease itself keeps its hour
    assert int(q.job('a')['lease_until']) - now_ms() > hour - 5000


@test
def ending_a_lease_deletes_the_record_of_the_call_that_made_it():
    q = fresh('recd')
    hour = 3600 * 1000
    q.enqueue([(f'j{i}', 'p', 0) for i in range(20)])
    # a worker that settles each job with its next claim, as the Rust worker does
    jobs, _, _, _ = q.settle_claim(1, vis=hour, request='r0')
    for i in range(1, 21):
        acks = [(jobs[0][0], jobs[0][3])]
        jobs, _, acked, _ = q.settle_claim(1, acks=acks, vis=hour, request=f'r{i}')
        assert acked == [1]
        assert record_keys(q) == [q.claimreq(f'r{i}').encode()], (i, record_keys(q))
    assert jobs == [] and q.stats()['acked'] == 20
    # the record of a call whose leases end by fail, and by ack, goes too
    q.enqueue([('f', 'p', 0), ('g', 'p', 0)])
    jobs, _, _, _ = q.settle_claim(2, vis=hour, request='two')
    tok = jobs[0][3]
    assert r.exists(q.claimreq('two'))
    q.settle_claim(1, fails=[('f', tok, 'e', 'dead', 0)], vis=hour, request='fail')
    assert not r.exists(q.claimreq('two'))
    q.enqueue([('h', 'p', 0)])
    jobs, _, _, _ = q.settle_claim(1, vis=hour, request='three')
    assert r.exists(q.claimreq('three'))
    assert q.ack([(b'h', jobs[0][3])]) == [1]
    assert not r.exists(q.claimreq('three')), 'ack deletes it too'
    # a stale ack deletes nothing; nor does ending a claim lease (its token is the slot's)
    q.enqueue([('k', 'p', 0)])
    jobs, _, _, _ = q.settle_claim(1, vis=hour, request='four')
    assert q.ack([(b'k', jobs[0][3] + b'x')]) == [0] and r.exists(q.claimreq('four'))


@test
def ending_a_claim_lease_deletes_no_record_and_sends_no_del():
    # settle_claim's lease tokens end with `:@<request>`; a claim lease's ends with its slot
    # token, which names no record, even when it is some request's id
    q = fresh('recn')
    q.enqueue([('a', 'p', 0), ('b', 'p', 0)])
    [ja] = q.claim(1, tokens=['req-b'])
    jobs, _, _, _ = q.settle_claim(1, vis=3600 * 1000, request='req-b')
    assert parse_token(jobs[0][3])[2] == b'@req-b' and r.exists(q.claimreq('req-b'))
    node = {'target_nodes': r.get_node_from_key(q.meta)} if CLUSTER else {}
    r.config_resetstat(**node)
    assert q.ack([(b'a', ja[3])]) == [1]
    # one DEL: the acked job's hash (no completed retention)
    assert r.info('commandstats', **node)['cmdstat_del']['calls'] == 1
    assert r.exists(q.claimreq('req-b')), 'the settle_claim record is left alone'
    assert q.ack([(b'b', jobs[0][3])]) == [1]
    assert not r.exists(q.claimreq('req-b')), 'its own lease ends it'
