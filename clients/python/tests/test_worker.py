"""The worker runtime's guarantees, each against a private redis-server."""
import asyncio

import jobqueue
from jobqueue import Job, Worker
from support import eventually


def run_in_background(worker: Worker) -> "asyncio.Task[jobqueue.WorkerStats]":
    return asyncio.ensure_future(worker.run())


async def stop(worker: Worker, task: "asyncio.Task[jobqueue.WorkerStats]") -> jobqueue.WorkerStats:
    worker.shutdown()
    return await asyncio.wait_for(task, 30)


async def test_every_job_is_acked_once_within_the_concurrency(queue):
    await queue.enqueue_many([Job(str(i).encode()) for i in range(300)])
    running = 0
    most = 0
    seen = []

    async def handle(job):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.002)
        seen.append(job.payload)
        running -= 1

    w = Worker(queue, handle, concurrency=8, handle_signals=False)
    task = run_in_background(w)
    await eventually(lambda: _stat(queue, "acked", 300), "300 acks")
    stats = await stop(w, task)
    assert stats.acked == 300 and sorted(seen) == sorted(str(i).encode() for i in range(300))
    assert 1 < most <= 8, most
    st = await queue.stats()
    assert st["pending"] == 0 and st["processing"] == 0 and st.get("stale", 0) == 0, st


async def _stat(queue, name, want):
    return (await queue.stats()).get(name, 0) >= want


async def test_failures_are_retried_then_dead_lettered_by_the_queue_settings(queue):
    await queue.configure(max_attempts=3, backoff_initial_ms=10, backoff_multiplier=1)
    await queue.enqueue(b"always fails", id="bad")
    await queue.enqueue(b"fails once", id="flaky")
    await queue.enqueue(b"give up", id="perm")
    attempts = {}

    async def handle(job):
        attempts[job.id] = job.attempts
        if job.id == "perm":
            raise jobqueue.DeadLetter("not worth retrying")
        if job.id == "bad" or job.attempts == 1:
            raise RuntimeError(f"boom {job.attempts}")

    w = Worker(queue, handle, concurrency=4, handle_signals=False)
    task = run_in_background(w)
    await eventually(lambda: _stat(queue, "dead", 2), "two dead jobs")
    await eventually(lambda: _stat(queue, "acked", 1), "the flaky job acked")
    stats = await stop(w, task)
    assert attempts == {"bad": 3, "flaky": 2, "perm": 1}, attempts
    assert stats.dead == 2 and stats.retried == 3 and stats.acked == 1, stats
    h = await queue.client.hgetall(queue.keys.job("bad"))
    assert h[b"status"] == b"dead" and h[b"last_error"] == b"RuntimeError: boom 3", h
    assert (await queue.client.hget(queue.keys.job("perm"), "last_error")) == b"not worth retrying"


async def test_a_job_longer_than_its_lease_is_renewed_and_acked(queue):
    await queue.enqueue(b"slow", id="slow")

    async def handle(job):
        await asyncio.sleep(1.0)

    w = Worker(queue, handle, visibility=0.3, handle_signals=False)
    task = run_in_background(w)
    await eventually(lambda: _stat(queue, "acked", 1), "the slow job acked")
    stats = await stop(w, task)
    assert stats.renewals >= 2 and stats.acked == 1 and stats.lost == 0, stats
    st = await queue.stats()
    assert st.get("reaped", 0) == 0 and st["claimed"] == 1, st


async def test_the_handler_is_cancelled_before_its_lease_ends_when_renewals_fail(queue, server):
    await queue.enqueue(b"", id="cut-off")
    cancelled_at = []
    clock = server.client()  # the Redis clock, read at once from inside the handler
    clock.ping()

    def redis_now():
        s, us = clock.time()
        return s * 1000 + us // 1000

    async def hang(*args, **kwargs):
        await asyncio.sleep(3600)

    queue.extend = hang  # renewals never answer: the worker is cut off from Redis

    async def handle(job):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled_at.append((job.lease_until, redis_now()))
            raise

    w = Worker(queue, handle, visibility=0.5, lease_grace=0.2, reaper=False, handle_signals=False)
    task = run_in_background(w)
    await eventually(lambda: _truthy(cancelled_at), "the handler cancelled")
    stats = await stop(w, task)
    (lease_until, now), = cancelled_at
    assert now < lease_until, f"cancelled at {now}, after the lease ended at {lease_until}"
    assert stats.lost == 1 and stats.acked == 0, stats
    assert (await queue.client.hget(queue.keys.job("cut-off"), "status")) == b"processing", "never acked"


async def _truthy(x):
    return bool(x)


async def test_a_stale_renewal_cancels_the_job_and_nothing_is_acked(queue):
    await queue.enqueue(b"", id="taken")
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def handle(job):
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    w = Worker(queue, handle, visibility=0.3, reaper=False, handle_signals=False)
    task = run_in_background(w)
    await asyncio.wait_for(started.wait(), 10)
    # another worker's reaper took the lease away
    await queue.client.hset(queue.keys.job("taken"), "claim_token", "someone-else")
    await asyncio.wait_for(cancelled.wait(), 10)
    stats = await stop(w, task)
    assert stats.lost == 1 and stats.acked == 0, stats


async def test_a_handler_past_its_timeout_is_failed(queue):
    await queue.configure(max_attempts=1)
    await queue.enqueue(b"", id="slow")

    async def handle(job):
        await asyncio.sleep(3600)

    w = Worker(queue, handle, timeout=0.2, handle_signals=False)
    task = run_in_background(w)
    await eventually(lambda: _stat(queue, "dead", 1), "the job dead-lettered")
    await stop(w, task)
    assert (await queue.client.hget(queue.keys.job("slow"), "last_error")).startswith(b"timed out after")


async def test_the_reaper_requeues_the_jobs_of_a_dead_worker(queue):
    await queue.enqueue(b"", id="orphaned")
    held = await queue.claim(1, "a-worker-that-died", visibility_ms=200)
    assert held.leases
    done = []

    async def handle(job):
        done.append((job.id, job.attempts))

    w = Worker(queue, handle, visibility=0.3, handle_signals=False)
    task = run_in_background(w)
    await eventually(lambda: _truthy(done), "the expired job run again")
    stats = await stop(w, task)
    assert done == [("orphaned", 2)] and stats.reaped == 1, (done, stats)


async def test_a_cancelled_job_is_stopped_and_ends_cancelled(queue):
    await queue.enqueue(b"", id="c")
    started = asyncio.Event()

    async def handle(job):
        started.set()
        await asyncio.sleep(3600)

    w = Worker(queue, handle, visibility=0.3, handle_signals=False)
    task = run_in_background(w)
    await asyncio.wait_for(started.wait(), 10)
    assert await queue.run("manage", [queue.keys.job("c")], "cancel", "c") == b"processing"
    await eventually(lambda: _stat(queue, "cancelled", 1), "the job cancelled")
    stats = await stop(w, task)
    assert stats.cancelled == 1 and stats.acked == 0, stats


async def test_a_delayed_job_runs_when_it_is_due(queue):
    done = asyncio.Event()

    async def handle(job):
        done.set()

    w = Worker(queue, handle, poll_interval=5, handle_signals=False)
    task = run_in_background(w)
    await asyncio.sleep(0.05)
    await queue.enqueue(b"", id="soon", delay=0.3)
    await asyncio.wait_for(done.wait(), 3)
    await stop(w, task)


async def test_shutdown_finishes_the_jobs_in_flight(queue):
    await queue.enqueue(b"", id="finish-me")
    started = asyncio.Event()

    async def handle(job):
        started.set()
        await asyncio.sleep(0.3)

    w = Worker(queue, handle, handle_signals=False)
    task = run_in_background(w)
    await asyncio.wait_for(started.wait(), 10)
    stats = await stop(w, task)
    assert stats.acked == 1
    assert not await queue.client.exists(queue.keys.job("finish-me"))


async def test_shutdown_releases_what_does_not_finish_in_time_uncharged(queue):
    await queue.enqueue(b"", id="too-long")
    started = asyncio.Event()

    async def handle(job):
        started.set()
        await asyncio.sleep(3600)

    w = Worker(queue, handle, shutdown_timeout=0.2, handle_signals=False)
    task = run_in_background(w)
    await asyncio.wait_for(started.wait(), 10)
    stats = await stop(w, task)
    assert stats.released == 1, stats
    h = await queue.client.hgetall(queue.keys.job("too-long"))
    assert h[b"status"] == b"pending" and h[b"attempts"] == b"0", h
    assert await queue.client.lrange(queue.keys.pending, 0, -1) == [b"too-long"]
