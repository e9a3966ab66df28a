"""Each script's reply is parsed in one place, tolerant where the protocol lets a reply
grow: table-driven, no server."""
import pytest

from jobqueue.queue import ProtocolError, parse_claim, parse_reap, parse_settle_claim, parse_stats
from jobqueue.worker import local_deadline

TOKEN = b"1764641234567:3:w-7:9f1c"


def test_claim_replies():
    job = [b"a", b"p", 1, TOKEN, 1764641264567]
    got = parse_claim([[job, job + [b"newer", 5]], 0])
    assert [l.id for l in got.leases] == ["a", "a"] and not got.more and got.wait_ms == 0
    assert got.leases[1].extra == [b"newer", 5], "fields after the fifth are kept aside"
    assert got.leases[0].claimed_at == 1764641234567 and got.leases[0].granted_ms == 30000
    assert parse_claim([[], 1]).more
    assert parse_claim([[], -250]).wait_ms == 250, "a rate limit's wait"
    for bad in ([], [[job]], [[[b"a"]], 0], "x", [[job], b"1"]):
        with pytest.raises(ProtocolError):
            parse_claim(bad)


def test_settle_claim_replies():
    flat = [0, TOKEN, 1, 0, b"delayed", b"x", b"px", 2, 1764641264567, b"y", b"py", 1, 1764641244567]
    got = parse_settle_claim(flat, 2, 1)
    assert got.acked == [True, False] and got.failed == ["delayed"]
    assert [(l.id, l.attempts, l.token) for l in got.claimed.leases] == [("x", 2, TOKEN), ("y", 1, TOKEN)]
    assert got.claimed.leases[1].granted_ms == 10000
    # a newer protocol's per-job arrays after the flat entries
    grown = parse_settle_claim(flat + [[0, 60000], [5000, 0]], 2, 1)
    assert [l.extra for l in grown.claimed.leases] == [[[0, 60000]], [[5000, 0]]]
    assert parse_settle_claim([-40, b""], 0, 0).claimed.wait_ms == 40
    assert parse_settle_claim([1, b""], 0, 0).claimed.more
    for bad, a, f in ((flat[:-1], 2, 1), ([0], 0, 0), (flat, 3, 1)):
        with pytest.raises(ProtocolError):
            parse_settle_claim(bad, a, f)


@pytest.mark.parametrize("token,at", [(TOKEN, 1764641234567), (b"plain-token", None), (b"-1:1:w:t", None),
                                       (b"1e3:1:w:t", None), (b"12345678901234567:1:w:t", None)])
def test_claimed_at_is_read_only_as_1_to_16_digits(token, at):
    from jobqueue import Lease

    assert Lease(b"a", b"", 1, token, 0).claimed_at == at


def test_reap_and_stats_replies():
    assert parse_reap([1, 2, 1, 3, 4, 99]).promoted == 3, "fields after the fifth are ignored"
    assert parse_reap([1, 2, 0]).restored == 0
    assert parse_stats([b"pending", 3, b"newer", 4, b"text", b"x"]) == {"pending": 3, "newer": 4}


def test_the_local_deadline_comes_before_the_lease_ends():
    for lease in (0.1, 1.0, 30.0, 3600.0):
        d = local_deadline(100.0, lease)
        assert 100.0 + lease * 0.9 < d < 100.0 + lease, lease
        assert 100.0 + lease - d <= 0.25
