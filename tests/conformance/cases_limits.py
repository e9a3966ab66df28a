"""Limits: the length of a job id, and stored data read in bounded steps.

Job ids are 1 to 1024 bytes (enqueue refuses others naming `id`). Whatever a job hash or
a request record holds (written by an older release, another client or by hand), every
script reading it answers promptly: each hostile case runs on a connection with a socket
timeout, and a script still running when it expires is ended with SCRIPT KILL (none of
them has written anything by then), so one hang fails one check, not the run.
"""
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from jq import *

PROMPT_S = 3


def prompt(what, q, name, extra_keys, *args):
    """q.ev(name, ...) on a connection that waits PROMPT_S seconds for the answer."""
    node = node_of(q.pending)
    kw = node.connection_pool.connection_kwargs
    # no retry: a call resent after the timeout would only queue behind the running one
    c = redis.Redis(host=kw.get('host', 'localhost'), port=kw['port'], socket_timeout=PROMPT_S,
                    retry=Retry(NoBackoff(), 0))
    try:
        return c.evalsha(SHAS[name], len(q.K) + len(extra_keys), *q.K, *extra_keys, q.jp, *args)
    except redis.TimeoutError:
        _kill_script(node)
        raise AssertionError(f'{what} did not answer within {PROMPT_S} s') from None
    except redis.ResponseError as e:
        if str(e).startswith('BUSY'):
            _kill_script(node)
            raise AssertionError(f'{what} did not answer within {PROMPT_S} s') from None
        raise
    finally:
        c.close()


def _kill_script(node):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            node.script_kill()
        except redis.ResponseError as e:
            if 'NOTBUSY' in str(e):
                return
        time.sleep(0.05)
    raise AssertionError('a script kept running after SCRIPT KILL')


def prompt_err(what, q, name, extra_keys, *args):
    try:
        prompt(what, q, name, extra_keys, *args)
    except redis.ResponseError as e:
        return str(e)
    raise AssertionError(f'{what}: expected an error')


@test
def enqueue_takes_ids_of_1_to_1024_bytes():
    q = fresh('idlen')
    assert q.enqueue([('a', 'p', 0)]) == [1]
    assert q.enqueue([('x' * 1024, 'p', 0)]) == [1]
    assert q.enqueue([(b'\xff' * 1024, 'p', 5000)]) == [1]
    assert q.stats()['pending'] == 2
    for bad, delay in [(b'', 0), (b'y' * 1025, 0), (b'z' * 1025, 5000), (b'w' * 131072, 0)]:
        snap = q.snapshot()
        # refused wherever it stands in the call: nothing of the call is written
        m = err_of(lambda: q.enqueue([('ok', 'p', 0), (bad, 'p', delay)]))
        assert m.startswith('jobqueue: invalid id: triple 2: expected an id of 1..1024 bytes, got '
                            + str(len(bad)) + ' bytes'), m
        assert q.snapshot() == snap, len(bad)
    assert not r.exists(q.jk('ok'))


def leased(q, id, token, **fields):
    """A job in processing whose hash holds `token` as its claim_token (and fields)."""
    until = now_ms() + 60000
    r.hset(q.jk(id), mapping={'payload': 'p', 'status': 'processing', 'attempts': 1,
                              'claim_token': token, 'lease_until': until, **fields})
    r.zadd(q.processing, {id: until})


# claim_tokens no claim writes: a start that is no decimal of 1 to 16 digits, or one
# that tonumber() reads as infinite, NaN or hexadecimal
HOSTILE_TOKENS = [b'-inf:', b'inf:', b'-inf:3:w-1:t', b'1e400:3:w-1:t', b'-1e400:1:w:t', b'nan:',
                  b'0x7fffffffffffffffffff:1:w:t', b'9' * 400 + b':1:w:t',
                  b'12345678901234567:1:w:t', b':1:w:t', b'-5:1:w:t', b' 5:1:w:t']


@test
def hostile_claim_tokens_are_acked_promptly():
    q = fresh('htok')
    for tok in HOSTILE_TOKENS:
        leased(q, 'j', tok)
        before = q.stats().get('h:0', 0)
        # the token still fences the lease byte for byte; an unreadable start counts as a
        # processing time of 0 (bucket h:0)
        assert prompt(f'ack {tok[:40]!r}', q, 'ack', [q.jk('j')], 1, 'j', tok) == [1], tok
        assert not r.exists(q.jk('j')) and q.stats().get('h:0', 0) == before + 1, tok
        leased(q, 'k', tok)
        flat = prompt(f'settle_claim acking {tok[:40]!r}', q, 'settle_claim',
                      [q.orphans, q.claimreq(os.urandom(8).hex())], 1, 'w', 0,
                      os.urandom(8).hex(), 1, 0, 'k', tok)
        assert flat[2] == 1 and not r.exists(q.jk('k')), (tok, flat)
        leased(q, 'f', tok)
        assert prompt(f'fail {tok[:40]!r}', q, 'fail', [q.jk('f')], 'f', tok, 'e', 'dead', -1) \
            == b'dead', tok


@test
def hostile_claimed_at_fields_are_read_promptly():
    q = fresh('hcat')
    # the older layout: the caller's token alone, claimed_at a field of its own
    for at in ['-inf', 'inf', '1e400', '-1e400', 'nan', '0x10', '9' * 400, '-' + '9' * 400, '',
               '12345678901234567', '1.5']:
        leased(q, 'j', 'tok', claimed_at=at)
        before = q.stats().get('h:0', 0)
        assert prompt(f'ack with claimed_at {at[:40]!r}', q, 'ack', [q.jk('j')], 1, 'j', 'tok') \
            == [1], at
        assert q.stats().get('h:0', 0) == before + 1, at
        leased(q, 'k', 'tok', claimed_at=at)
        flat = prompt(f'settle_claim with claimed_at {at[:40]!r}', q, 'settle_claim',
                      [q.orphans, q.claimreq(os.urandom(8).hex())], 1, 'w', 0,
                      os.urandom(8).hex(), 1, 0, 'k', 'tok')
        assert flat[2] == 1, (at, flat)
    # a readable one still gives the processing time
    leased(q, 'j', 'tok', claimed_at=str(now_ms() - 5000))
    assert q.ack([('j', 'tok')]) == [1] and q.stats().get('h:12', 0) == 1


def packed(*items):
    """A settle_claim record: the MessagePack array of items, packed by Redis itself
    (numbers given as text become Lua numbers, so 'inf' and '1e300' are possible)."""
    lua = ('local t = {} for i = 1, #ARGV, 2 do '
           'if ARGV[i] == "n" then t[#t + 1] = tonumber(ARGV[i + 1]) else t[#t + 1] = ARGV[i + 1] end '
           'end return cmsgpack.pack(t)')
    args = []
    for x in items:
        args += ['n', x] if isinstance(x, (int, float)) or x in ('inf', '1e300', '-inf', 'nan') \
            else ['s', x]
    return r.eval(lua, 0, *args)


@test
def hostile_request_records_get_prompt_answers():
    q = fresh('hreq')
    # settle_claim: a record whose counts are no counts a call can have
    for name, rec in [('a = 1e300', packed(0, '1e300', 0, '')), ('a = inf', packed(0, 'inf', 0, '')),
                      ('f = 2^31', packed(0, 0, 2 ** 31, '')), ('a = -5', packed(0, -5, 0, '')),
                      ('a + f = 1001', packed(0, 600, 401, '')), ('a = 1.5', packed(0, 1.5, 0, '')),
                      ('more = inf', packed('inf', 0, 0, ''))]:
        req = os.urandom(8).hex()
        r.set(q.claimreq(req), rec)
        snap = q.snapshot()
        m = prompt_err(f'settle_claim replaying a record with {name}', q, 'settle_claim',
                       [q.orphans, q.claimreq(req)], 1, 'w', 0, req, 0, 0)
        assert m.startswith(f'jobqueue: invalid request: the record of request "{req}" at '
                            f'{q.claimreq(req)} is not one settle_claim writes'), (name, m)
        assert q.snapshot() == snap, name
    # a record that is no MessagePack array at all is refused the same way
    r.set(q.claimreq('junk'), b'\xc1not msgpack')
    m = prompt_err('settle_claim replaying junk', q, 'settle_claim',
                   [q.orphans, q.claimreq('junk')], 1, 'w', 0, 'junk', 0, 0)
    assert m.startswith('jobqueue: invalid request: the record of request "junk"'), m
    # claim: a record longer than any claim writes, or with a `more` that is no 0 or 1
    r.rpush(q.claimreq('long'), '0', *(['id', 'tok'] * 1500))
    m = prompt_err('claim replaying a record of 3001 entries', q, 'claim',
                   [q.orphans, q.claimreq('long')], 1, 'w', 0, 'long', 't')
    assert m.startswith(f'jobqueue: invalid request: the record of request "long" at '
                        f'{q.claimreq("long")} is not one claim writes'), m
    r.rpush(q.claimreq('inf'), 'inf', 'id', 'tok')
    m = prompt_err('claim replaying more = inf', q, 'claim', [q.orphans, q.claimreq('inf')], 1,
                   'w', 0, 'inf', 't')
    assert m.startswith('jobqueue: invalid request: the record of request "inf"'), m
    # a record as the scripts write it still replays
    q.enqueue([('a', 'p', 0)])
    first = q.claim_reply(1, request='good')
    assert q.claim_reply(1, request='good') == first
