"""The producer API and the low-level calls, against a private redis-server."""
import asyncio
import datetime as dt

import pytest
import redis.asyncio as aioredis

import jobqueue
from jobqueue import Job


async def test_enqueue_one_and_many_with_ids_and_stats(queue):
    one = await queue.enqueue(b"hello")
    assert len(one.id) == 12 and one.created
    given = await queue.enqueue("text payload", id="order-1")
    assert given == jobqueue.Enqueued("order-1", True)
    again = await queue.enqueue(b"other", id="order-1")
    assert again == jobqueue.Enqueued("order-1", False), "an id already there is not enqueued twice"
    many = await queue.enqueue_many([Job(f"p{i}".encode()) for i in range(2500)])
    assert len(many) == 2500 and all(e.created for e in many)
    assert len({e.id for e in many}) == 2500
    st = await queue.stats()
    assert st["pending"] == 2502 and st["enqueued"] == 2502, st
    claimed = await queue.claim(2, "w")
    assert [l.payload for l in claimed.leases] == [b"hello", b"text payload"], "FIFO"


async def test_delays_and_run_at_use_the_redis_clock(queue):
    now = await queue.now_ms()
    await queue.enqueue(b"later", id="d", delay=60)
    await queue.enqueue(b"at", id="a", at=now + 120_000)
    await queue.enqueue(b"at-dt", id="b", at=dt.datetime.fromtimestamp((now + 180_000) / 1000, dt.timezone.utc))
    await queue.enqueue(b"past", id="p", at=now - 1000)
    r = queue.client
    scores = dict(await r.zrange(queue.keys.delayed, 0, -1, withscores=True))
    assert set(scores) == {b"d", b"a", b"b"}, scores
    assert now + 60_000 <= scores[b"d"] <= now + 70_000
    assert scores[b"a"] == now + 120_000
    assert abs(scores[b"b"] - (now + 180_000)) <= 1
    assert (await queue.claim(5, "w")).leases[0].id == "p", "a run-at in the past is ready now"
    with pytest.raises(ValueError):
        Job(b"x", at=dt.datetime(2030, 1, 1)).delay_arg()


async def test_per_job_options_are_written_into_the_job(queue):
    await queue.enqueue(b"x", id="o", max_attempts=7, backoff_initial=0.25, backoff_max=10, backoff_multiplier=1.5)
    h = await queue.client.hgetall(queue.keys.job("o"))
    assert h[b"max_attempts"] == b"7" and h[b"backoff_initial_ms"] == b"250"
    assert h[b"backoff_max_ms"] == b"10000" and h[b"backoff_multiplier"] == b"1.5"
    # jobs with other options go in other calls; the plain one has none
    res = await queue.enqueue_many([Job(b"1", id="p1"), Job(b"2", id="p2", max_attempts=2), Job(b"3", id="p3")])
    assert [e.created for e in res] == [True, True, True]
    assert b"max_attempts" not in await queue.client.hgetall(queue.keys.job("p1"))
    assert (await queue.client.hget(queue.keys.job("p2"), "max_attempts")) == b"2"


async def test_bad_input_is_refused_before_anything_is_written(queue):
    with pytest.raises(ValueError, match="invalid job id"):
        await queue.enqueue(b"x", id="")
    with pytest.raises(ValueError, match="invalid job id"):
        await queue.enqueue(b"x", id="i" * 1025)
    with pytest.raises(jobqueue.ScriptError, match="invalid max_attempts"):
        await queue.enqueue(b"x", max_attempts=0)
    assert (await queue.stats())["pending"] == 0
    with pytest.raises(ValueError, match="braces"):
        jobqueue.QueueKeys.new("{x}")


async def test_binary_ids_round_trip(queue):
    raw = b"id\x00\xff\n"
    e = await queue.enqueue(b"\x01", id=raw)
    lease = (await queue.claim(1, "w")).leases[0]
    assert lease.id_bytes == raw and lease.id == e.id
    assert await queue.ack([lease]) == [True]


async def test_settle_claim_acks_fails_and_claims_in_one_call(queue):
    await queue.configure(backoff_initial_ms=0)
    await queue.enqueue_many([Job(b"", id=i) for i in "abcd"])
    first = await queue.claim(2, "w")
    a, b = first.leases
    reply = await queue.settle_claim(jobqueue.new_token(), [a], [jobqueue.Fail(b, "boom")], 2, "w")
    assert reply.acked == [True] and reply.failed == ["pending"]
    assert [l.id for l in reply.claimed.leases] == ["c", "d"]
    # a new call with the ended lease: stale, and the claim happens (b, retried)
    again = await queue.settle_claim(jobqueue.new_token(), [a], [], 1, "w")
    assert again.acked == [False] and [l.id for l in again.claimed.leases] == ["b"]
    st = await queue.stats()
    assert st["acked"] == 1 and st["retried"] == 1 and st["processing"] == 3 and st["unknown"] == 1, st


async def test_a_resent_settle_claim_learns_what_the_first_did(queue):
    await queue.enqueue_many([Job(b"", id=i) for i in "ab"])
    a = (await queue.claim(1, "w")).leases[0]
    req = jobqueue.new_token()
    first = await queue.settle_claim(req, [a], [], 1, "w")
    resent = await queue.settle_claim(req, [a], [], 1, "w")
    assert first.acked == resent.acked == [True]
    assert [l.id for l in resent.claimed.leases] == [l.id for l in first.claimed.leases] == ["b"]
    assert (await queue.stats())["replayed"] == 1


async def test_extend_fail_release_and_reap(queue):
    await queue.configure(max_attempts=2, backoff_initial_ms=0)
    await queue.enqueue(b"", id="x")
    lease = (await queue.claim(1, "w", visibility_ms=50)).leases[0]
    [until] = await queue.extend([lease], 60_000)
    assert until > await queue.now_ms() + 50_000
    assert await queue.release(lease)
    lease = (await queue.claim(1, "w", visibility_ms=1)).leases[0]
    assert lease.attempts == 1, "a release does not charge the attempt"
    await asyncio.sleep(0.01)
    reaped = await queue.reap()
    assert reaped.requeued == 1 and not reaped.more
    assert await queue.fail(lease, "late") == "stale", "the reaped lease is fenced"
    lease = (await queue.claim(1, "w")).leases[0]
    assert lease.attempts == 2
    assert await queue.fail(lease, "boom") == "dead"
    assert (await queue.client.hget(queue.keys.job("x"), "last_error")) == b"boom"


async def test_scripts_are_reloaded_after_a_script_flush(queue):
    await queue.enqueue(b"a")
    await queue.client.script_flush()
    assert (await queue.stats())["pending"] == 1


async def test_a_wrong_typed_key_is_named(queue):
    await queue.client.set(queue.keys.stats, "x")
    with pytest.raises(jobqueue.ScriptError, match="wrong type"):
        await queue.enqueue(b"a")


async def test_unique_keys(queue):
    first = await queue.enqueue(b"a", id="u1", unique_key="user-7")
    refused = await queue.enqueue(b"b", id="u2", unique_key="user-7")
    assert first.created and not refused.created and refused.held_by == "u1", refused
    other = await queue.enqueue_many([Job(b"c", unique_key="user-8"), Job(b"d"), Job(b"e", unique_key="user-9", unique_mode="until-started")])
    assert [e.created for e in other] == [True, True, True]
    h = await queue.client.hgetall(queue.keys.job("u1"))
    assert h[b"unique_key"] == b"user-7" and h[b"unique_mode"] == b"until-done"
    d1 = await queue.enqueue(b"v1", id="d1", unique_key="deb", unique_mode="debounce", delay=60)
    d2 = await queue.enqueue(b"v2", id="d2", unique_key="deb", unique_mode="debounce")
    assert d1.created and not d2.created and d2.replaced and d2.held_by == "d1", d2
    assert await queue.client.hget(queue.keys.job("d1"), "payload") == b"v2"
