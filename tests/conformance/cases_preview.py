"""preview: job hashes for a list, each payload cut to its first n bytes, read-only.

The reply carries at most n payload bytes per job whatever the payload's size (the
client reads a bounded amount); the whole payload's length comes as HSTRLEN gives it.
"""
from jq import *


def preview(q, ids, n):
    return q.ev('preview', [q.jk(i) for i in ids], n)


@test
def preview_cuts_payloads_and_writes_nothing():
    q = fresh('prev')
    big = b'{"blob":"' + b'x' * (4 << 20) + b'"}'
    assert q.enqueue([('big', big, 0), ('small', 'tiny', 0), (b'\xff\x00', b'\xfe', 0)]) == [1, 1, 1]
    r.hset(q.jk('small'), mapping={'status': 'dead', 'last_error': 'boom', 'attempts': 2})
    r.set(q.jk('str'), 'not a hash')
    snap = q.snapshot()
    node = node_of(q.pending)  # the server whose replies are counted: the queue's
    before = int(node.info('stats')['total_net_output_bytes'])
    reply = preview(q, ['big', 'small', b'\xff\x00', 'gone', 'str'], 200)
    sent = int(node.info('stats')['total_net_output_bytes']) - before
    assert q.snapshot() == snap
    assert sent < 4096, sent
    big_r, small_r, raw_r, gone_r, str_r = reply
    assert big_r[0] == len(big) and big_r[1] == big[:200], big_r[:2]
    assert big_r[2:] == [] or b'payload' not in big_r[2::2]
    small_fields = dict(zip(small_r[2::2], small_r[3::2]))
    assert small_fields.pop(b'enqueued_at', b'').isdigit()  # a job enqueued ready
    assert small_r[0] == 4 and small_r[1] == b'tiny'
    assert small_fields == {b'status': b'dead', b'last_error': b'boom', b'attempts': b'2'}, small_fields
    assert raw_r[0] == 1 and raw_r[1] == b'\xfe'
    assert gone_r == [] and str_r == []
    # n = 0: lengths only; a hash with no payload field: -1 and ''
    r.hset(q.jk('nopayload'), 'status', 'dead')
    big_0, nopayload_0 = preview(q, ['big', 'nopayload'], 0)
    assert big_0[:2] == [len(big), b''] and b'payload' not in big_0[2::2], big_0
    assert nopayload_0 == [-1, b'', b'status', b'dead'], nopayload_0


@test
def preview_refuses_bad_arguments():
    q = fresh('prevbad')
    for n in ['-1', '65537', 'x', '1.5']:
        m = err_of(lambda: preview(q, ['a'], n))
        assert m.startswith('jobqueue: invalid n: expected an integer 0..65536, got '), m
    m = err_of(lambda: q.ev('preview', [], 10))
    assert m.startswith('jobqueue: invalid keys: expected the 7 queue keys and 1..1000 job keys, got 7'), m
    m = err_of(lambda: q.ev('preview', [q.jk('a')], 10, 'extra'))
    assert m == 'jobqueue: invalid arguments: expected 2 (prefix, n), got 3', m
    m = err_of(lambda: q.ev('preview', [q.jk(str(i)) for i in range(1001)], 10))
    assert 'got 1008' in m, m
