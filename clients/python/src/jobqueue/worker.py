"""The worker runtime, with the Rust worker's guarantees (src/worker/runtime.rs):

- **Bounded concurrency**: at most ``concurrency`` leases held at once; a slot is taken
  at the claim and given back when the lease's ack or fail is answered.
- **One call per batch**: finished jobs are acked (or failed) by the claim loop's next
  ``settle_claim``, which claims the next jobs in the same round trip. While the loop
  sleeps on the wake list, a completer ends leases with ``ack`` and ``fail``.
- **Batched renewals**: every lease in flight is extended in one ``extend`` call at a
  third of the lease length; a stale answer cancels that job, ``-1`` (cancellation asked
  for) stops it and ends its lease as cancelled.
- **A local lease deadline**: the moment the call that granted or last renewed a lease
  was sent, plus the lease length, less a margin (:func:`local_deadline`). When it passes without a renewal the handler is
  cancelled (its result is never acked); one that does not stop within
  ``lease_grace`` is abandoned. A claim whose reply came after the deadline is released
  without running.
- **Retries and dead-letter** by the queue's settings (or the job's own): an exception
  fails the job in mode ``retry`` (backoff by policy), :class:`DeadLetter` in mode
  ``dead``; ``timeout`` bounds a handler's run.
- **A reaper**: every half lease (±25 %), bounded passes of ``reap`` put expired leases
  of dead workers back in line and promote due delayed jobs.
- **Graceful shutdown** on SIGTERM or SIGINT: claiming stops, jobs in flight finish up
  to ``shutdown_timeout``, then are cancelled and released (uncharged); a second signal
  skips the wait.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from .queue import TRANSIENT, MAX_BATCH, REQUEST_RETRY_WINDOW, Fail, Lease, Queue, SettleReply, new_token

log = logging.getLogger("jobqueue.worker")

Handler = Callable[[Lease], Awaitable[Any]]

MAX_ERROR_TEXT = 4096
REAP_BATCH = 100
REAP_CALLS = 10
#: After the shutdown deadline, how long cancelled handlers get to unwind.
ABORT_GRACE = 2.0


def local_deadline(sent: float, lease_s: float) -> float:
    """When a lease granted or renewed by a call sent at ``sent`` (the loop's clock),
    asking for ``lease_s``, is treated as gone here. Redis starts the lease no earlier
    than it receives the call, so ``sent + lease_s`` comes before the lease ends; the
    deadline is put a little earlier still (5 % of the lease, at most 250 ms) because an
    event loop's timers fire late by a few milliseconds when it is busy."""
    return sent + lease_s - min(lease_s * 0.05, 0.25)


class DeadLetter(Exception):
    """Raised by a handler: the job goes to the dead-letter set at once, not retried."""


class Retry(Exception):
    """Raised by a handler: retry the job after ``backoff`` seconds (None: the policy)."""

    def __init__(self, message: str = "", backoff: Optional[float] = None) -> None:
        super().__init__(message)
        self.backoff = backoff


@dataclass
class WorkerStats:
    claimed: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    stale: int = 0
    lost: int = 0
    cancelled: int = 0
    reaped: int = 0
    renewals: int = 0
    redis_errors: int = 0


@dataclass
class _InFlight:
    lease: Lease
    deadline: float
    #: The lease length in force: the one asked for, or the job's own when Redis
    #: granted less (lease_until - claimed_at).
    lease_s: float
    #: The handler's task (cancelled when the lease is lost or at the shutdown deadline).
    task: Optional["asyncio.Task[Any]"] = None
    #: The task that runs the handler and reports its outcome.
    runner: Optional["asyncio.Task[Any]"] = None
    completing: bool = False
    lost_at: Optional[float] = None
    cancelled: bool = False
    timed_out: bool = False


@dataclass
class _Ending:
    lease: Lease
    #: None: ack; else (error text, mode, backoff ms).
    fail: Optional[Tuple[str, str, int]] = None


def _truncate(text: str) -> str:
    raw = text.encode("utf-8", "replace")
    if len(raw) <= MAX_ERROR_TEXT:
        return text
    return raw[: MAX_ERROR_TEXT - 3].decode("utf-8", "ignore") + "..."


class _Delay:
    def __init__(self, initial: float = 0.05, most: float = 2.0) -> None:
        self.initial, self.most, self.current = initial, most, initial

    def next(self) -> float:
        d = self.current
        self.current = min(self.current * 2, self.most)
        return d * random.uniform(0.75, 1.25)

    def reset(self) -> None:
        self.current = self.initial


class Worker:
    """Runs ``handler`` (``async def handler(job: Lease)``) on jobs of ``queue``.

    ``visibility`` (seconds) is the lease length to ask for; None follows the queue's
    ``visibility_timeout_ms``. ``timeout`` bounds one run of the handler."""

    def __init__(
        self,
        queue: Queue,
        handler: Handler,
        *,
        concurrency: int = 10,
        visibility: Optional[float] = None,
        timeout: Optional[float] = None,
        lease_grace: float = 5.0,
        shutdown_timeout: float = 30.0,
        poll_interval: float = 1.0,
        reaper: bool = True,
        max_claim: int = 32,
        worker_id: Optional[str] = None,
        handle_signals: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError("invalid concurrency: at least 1")
        if visibility is not None and visibility <= 0:
            raise ValueError("invalid visibility: a positive number of seconds")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.visibility = visibility
        self.timeout = timeout
        self.lease_grace = lease_grace
        self.shutdown_timeout = shutdown_timeout
        self.poll_interval = poll_interval
        self.reaper = reaper
        self.max_claim = max(1, min(max_claim, concurrency, MAX_BATCH))
        self.worker_id = worker_id or f"py-{socket.gethostname()}-{os.getpid()}-{new_token()[:6]}"
        self.handle_signals = handle_signals
        self.stats = WorkerStats()
        self._inflight: Dict[Tuple[bytes, bytes], _InFlight] = {}
        self._endings: List[_Ending] = []
        self._endings_open = True
        self._direct: List[_Ending] = []
        self._lease_s = 30.0
        self._shutdown: Optional[asyncio.Event] = None
        self._hard_stop: Optional[asyncio.Event] = None
        self._wake_claimer: Optional[asyncio.Event] = None
        self._wake_completer: Optional[asyncio.Event] = None
        self._wake_watcher: Optional[asyncio.Event] = None
        self._wake_idle: Optional[asyncio.Event] = None
        self._completing_tasks: "set[asyncio.Task[Any]]" = set()

    # --- public ----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Begin a graceful shutdown (as SIGTERM does)."""
        if self._shutdown is not None:
            if self._shutdown.is_set() and self._hard_stop is not None:
                self._hard_stop.set()
            self._shutdown.set()
            self._poke_claimer()
            self._poke_idle()

    async def run(self) -> WorkerStats:
        """Work until :meth:`shutdown` (or SIGTERM/SIGINT); returns the counters."""
        loop = asyncio.get_running_loop()
        self._shutdown, self._hard_stop = asyncio.Event(), asyncio.Event()
        self._wake_claimer, self._wake_completer, self._wake_watcher = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._wake_idle = asyncio.Event()
        installed: List[signal.Signals] = []
        if self.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        if self.visibility is not None:
            self._lease_s = self.visibility
        else:
            self._lease_s = await self._queue_visibility(30.0)
        log.info("worker started: queue=%s worker=%s concurrency=%d visibility=%.3fs", self.queue.name, self.worker_id, self.concurrency, self._lease_s)
        helpers = [
            asyncio.ensure_future(self._complete_loop()),
            asyncio.ensure_future(self._renew_loop()),
            asyncio.ensure_future(self._watch_deadlines()),
        ]
        if self.reaper:
            helpers.append(asyncio.ensure_future(self._reap_loop()))
        try:
            await self._claim_loop()
            await self._wait_for_jobs()
        finally:
            for t in helpers:
                t.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            for sig in installed:
                loop.remove_signal_handler(sig)
        log.info("worker stopped: %s", self.stats)
        return self.stats

    # --- signals and wake-ups ---------------------------------------------------------

    def _on_signal(self, sig: int) -> None:
        assert self._shutdown is not None and self._hard_stop is not None
        if self._shutdown.is_set():
            log.warning("%s received again: abandoning the jobs in flight", signal.Signals(sig).name)
            self._hard_stop.set()
        else:
            log.info("%s received: shutting down gracefully (send it again to stop now)", signal.Signals(sig).name)
            self._shutdown.set()
        self._poke_claimer()
        self._poke_idle()

    def _poke_claimer(self) -> None:
        if self._wake_claimer is not None:
            self._wake_claimer.set()

    def _poke_idle(self) -> None:
        """Cut the idle wait short: shutdown, or this worker delayed a job (the earliest
        due time may have moved)."""
        if self._wake_idle is not None:
            self._wake_idle.set()

    def _held(self) -> int:
        return len(self._inflight)

    # --- the claim loop ---------------------------------------------------------------

    async def _claim_loop(self) -> None:
        assert self._shutdown is not None and self._wake_claimer is not None
        loop = asyncio.get_running_loop()
        delay = _Delay()
        while not self._shutdown.is_set():
            endings = self._endings[:MAX_BATCH]
            del self._endings[: len(endings)]
            free = self.concurrency - self._held() + len(endings)
            if not endings and free <= 0:
                self._wake_claimer.clear()
                if self._endings or self._shutdown.is_set():
                    continue
                await self._wake_claimer.wait()
                continue
            n = max(1, min(self.max_claim, free))
            lease_s = self._lease_s
            sent = loop.time()
            reply, first_sent = await self._settle_and_claim(endings, n, lease_s, delay)
            if reply is None:
                if not self._shutdown.is_set():
                    await self._sleep_or_shutdown(delay.next())
                continue
            delay.reset()
            leases = reply.claimed.leases
            if leases:
                self.stats.claimed += len(leases)
                for lease in leases:
                    own = lease.granted_ms
                    held_s = lease_s if own is None or own <= 0 else min(lease_s, own / 1000)
                    self._start(lease, local_deadline(min(sent, first_sent), held_s), held_s)
                continue
            if reply.claimed.more:
                continue
            if reply.claimed.wait_ms > 0:
                # The queue's rate limit: no slot before then.
                await self._sleep_or_shutdown(min(reply.claimed.wait_ms / 1000, self.poll_interval))
                continue
            await self._idle_wait()

    async def _idle_wait(self) -> None:
        """Nothing to claim: sleep on the wake list up to the poll interval, or until the
        earliest delayed job is due, this worker delays a job, or shutdown begins.
        Meanwhile the completer ends finished jobs' leases (the wait is never cut short
        by one, which would drop the BLPOP's connection)."""
        assert self._shutdown is not None and self._wake_idle is not None
        self._endings_open = False
        if self._endings:
            self._endings_open = True
            return
        try:
            self._wake_idle.clear()
            try:
                due = await self.queue.next_due_in()
            except Exception:
                due = None
            block, limit = self.poll_interval, self.poll_interval + 0.25
            if due is not None and due + 0.001 < block:
                # Redis ends a blocking command on its own coarse timer: the due time is
                # kept here, dropping the BLPOP (and its connection) when it passes.
                block = limit = max(due + 0.001, 0.005)
            if self._shutdown.is_set() or self._wake_idle.is_set():
                return
            waiting = asyncio.ensure_future(self.queue.wait_for_wake(block))
            poked = asyncio.ensure_future(self._wake_idle.wait())
            try:
                done, _ = await asyncio.wait({waiting, poked}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (waiting, poked):
                    if not t.done():
                        t.cancel()
                await asyncio.gather(waiting, poked, return_exceptions=True)
            if waiting in done and waiting.exception() is not None:
                self.stats.redis_errors += 1
                log.warning("waiting for jobs failed: %s", waiting.exception())
                await self._sleep_or_shutdown(self.poll_interval)
        finally:
            self._endings_open = True

    async def _sleep_or_shutdown(self, seconds: float) -> None:
        assert self._shutdown is not None
        try:
            await asyncio.wait_for(self._shutdown.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    async def _settle_and_claim(
        self, endings: List[_Ending], n: int, lease_s: float, delay: _Delay
    ) -> Tuple[Optional[SettleReply], float]:
        """One settle_claim: end ``endings``, claim up to ``n``. Resent unchanged (same
        request id) on a lost reply; past the retry window as a new request."""
        assert self._hard_stop is not None
        loop = asyncio.get_running_loop()
        acks = [e.lease for e in endings if e.fail is None]
        fails = [Fail(e.lease, e.fail[0], e.fail[1], e.fail[2]) for e in endings if e.fail is not None]
        request = new_token()
        first_sent = loop.time()
        tries = 0
        reply: Optional[SettleReply] = None
        while True:
            try:
                reply = await self.queue.settle_claim(request, acks, fails, n, self.worker_id, max(1, int(lease_s * 1000)))
                break
            except TRANSIENT as err:
                tries += 1
                self.stats.redis_errors += 1
                wait = delay.next()
                if not endings and tries >= 3:
                    log.warning("claim failed: %s", err)
                    break
                if self._hard_stop.is_set():
                    break
                log.warning("ending leases and claiming failed (%s); retrying in %.2fs", err, wait)
                await asyncio.sleep(wait)
                if loop.time() - first_sent + wait > REQUEST_RETRY_WINDOW:
                    request, first_sent = new_token(), loop.time()
            except Exception as err:  # a script error: never resent
                self.stats.redis_errors += 1
                log.error("ending leases and claiming failed: %s; the leases will expire", err)
                break
        for e in endings:
            self._inflight.pop((e.lease.id_bytes, e.lease.token), None)
        if reply is not None:
            for lease, ok in zip(acks, reply.acked):
                self._note_ack(lease, ok)
            for f, outcome in zip(fails, reply.failed):
                self._note_fail(f.lease, outcome)
        return reply, first_sent

    # --- running a job ----------------------------------------------------------------

    def _start(self, lease: Lease, deadline: float, lease_s: float) -> None:
        loop = asyncio.get_running_loop()
        key = (lease.id_bytes, lease.token)
        f = _InFlight(lease, deadline, lease_s)
        self._inflight[key] = f
        if loop.time() >= deadline:
            log.warning("job %s: the claim's reply came after the lease's local deadline; releasing it", lease.id)
            self.stats.lost += 1
            self._finish(f, _Ending(lease, ("", "release", 0)))
            return
        f.task = asyncio.ensure_future(self.handler(lease))
        f.runner = asyncio.ensure_future(self._run_job(f))
        assert self._wake_watcher is not None
        self._wake_watcher.set()

    async def _run_job(self, f: _InFlight) -> None:
        lease = f.lease
        handler_task = f.task
        assert handler_task is not None
        error: Optional[BaseException] = None
        try:
            if self.timeout is None:
                await handler_task
            else:
                done, _ = await asyncio.wait({handler_task}, timeout=self.timeout)
                if not done:
                    # Past its run time: cancelled, given the grace to stop, then failed
                    # (retried or dead) whether or not it stopped.
                    f.timed_out = True
                    handler_task.cancel()
                    await asyncio.wait({handler_task}, timeout=self.lease_grace)
        except BaseException:
            pass  # the outcome is read from the task below
        if handler_task.done() and not handler_task.cancelled():
            error = handler_task.exception()
        shutting = self._shutdown is not None and self._shutdown.is_set()
        if f.cancelled:
            self._finish(f, None, cancelled=True)
        elif f.lost_at is not None:
            if self._inflight.pop((lease.id_bytes, lease.token), None) is not None:
                self.stats.lost += 1
                log.warning("job %s: the lease was lost while the job ran; its result is not acked", lease.id)
        elif f.timed_out:
            self._finish(f, _Ending(lease, (f"timed out after {self.timeout}s", "retry", -1)))
        elif not handler_task.done() or handler_task.cancelled():
            # Cancelled by the shutdown: give it back, uncharged.
            self._finish(f, _Ending(lease, ("", "release", 0)))
        elif error is None:
            self._finish(f, _Ending(lease))
        elif isinstance(error, DeadLetter):
            self._finish(f, _Ending(lease, (_truncate(str(error) or repr(error)), "dead", -1)))
        elif isinstance(error, Retry):
            backoff = -1 if error.backoff is None else max(0, int(error.backoff * 1000))
            self._finish(f, _Ending(lease, (_truncate(str(error) or repr(error)), "retry", backoff)))
        elif isinstance(error, asyncio.CancelledError) and shutting:
            self._finish(f, _Ending(lease, ("", "release", 0)))
        else:
            self._finish(f, _Ending(lease, (_truncate(f"{type(error).__name__}: {error}"), "retry", -1)))

    def _finish(self, f: _InFlight, ending: Optional[_Ending], cancelled: bool = False) -> None:
        """A job is done with: its lease is ended by the claim loop's next call (ack and
        fail) or by the completer (releases, cancellations, and anything while the claim
        loop sleeps or has stopped)."""
        f.completing = True
        if cancelled:
            self._direct.append(_Ending(f.lease, ("", "cancelled", 0)))
        elif ending is not None and ending.fail is not None and ending.fail[1] == "release":
            self._direct.append(ending)
        elif ending is not None:
            if self._endings_open and self._shutdown is not None and not self._shutdown.is_set():
                self._endings.append(ending)
                self._poke_claimer()
                return
            self._direct.append(ending)
        if self._wake_completer is not None:
            self._wake_completer.set()

    # --- the completer ----------------------------------------------------------------

    async def _complete_loop(self) -> None:
        assert self._wake_completer is not None
        while True:
            await self._wake_completer.wait()
            self._wake_completer.clear()
            await self._complete_direct()

    async def _complete_direct(self) -> None:
        items, self._direct = self._direct, []
        if not items:
            return
        acks = [e.lease for e in items if e.fail is None]
        others = [e for e in items if e.fail is not None]
        jobs: List[Awaitable[Any]] = []
        if acks:
            jobs.append(self._ack_all(acks))
        jobs += [self._end_one(e) for e in others]
        await asyncio.gather(*jobs)
        if self._wake_claimer is not None:
            self._wake_claimer.set()

    async def _with_retry(self, what: str, op: Callable[[], Awaitable[Any]]) -> Any:
        assert self._hard_stop is not None
        delay = _Delay()
        while True:
            try:
                return await op()
            except TRANSIENT as err:
                self.stats.redis_errors += 1
                if self._hard_stop.is_set():
                    log.error("%s failed (%s); giving up, the lease will expire", what, err)
                    return None
                wait = delay.next()
                log.warning("%s failed (%s); retrying in %.2fs", what, err, wait)
                await asyncio.sleep(wait)
            except Exception as err:
                self.stats.redis_errors += 1
                log.error("%s failed: %s; giving up, the lease will expire", what, err)
                return None

    async def _ack_all(self, leases: List[Lease]) -> None:
        for i in range(0, len(leases), MAX_BATCH):
            part = leases[i : i + MAX_BATCH]
            flags = await self._with_retry("ack", lambda: self.queue.ack(part))
            for lease, ok in zip(part, flags or []):
                self._note_ack(lease, ok)
            for lease in part:
                self._inflight.pop((lease.id_bytes, lease.token), None)

    async def _end_one(self, e: _Ending) -> None:
        assert e.fail is not None
        text, mode, backoff = e.fail
        lease = e.lease
        if mode == "cancelled":
            ok = await self._with_retry("cancel", lambda: self.queue.end_cancelled(lease))
            if ok:
                self.stats.cancelled += 1
                log.info("job %s cancelled: stopped, neither retried nor dead-lettered", lease.id)
            elif ok is not None:
                self.stats.stale += 1
        else:
            outcome = await self._with_retry(mode, lambda: self.queue.fail(lease, text, mode, backoff))
            if outcome is not None:
                if mode == "release":
                    if outcome == "stale":
                        self.stats.stale += 1
                    else:
                        self.stats.released += 1
                        log.info("job %s released without charging the attempt", lease.id)
                else:
                    self._note_fail(lease, outcome)
        self._inflight.pop((lease.id_bytes, lease.token), None)

    def _note_ack(self, lease: Lease, ok: bool) -> None:
        if ok:
            self.stats.acked += 1
        else:
            self.stats.stale += 1
            log.warning("job %s: ack refused as stale: the lease had been taken away", lease.id)

    def _note_fail(self, lease: Lease, outcome: str) -> None:
        if outcome == "dead":
            self.stats.dead += 1
            log.warning("job %s dead-lettered (attempt %d)", lease.id, lease.attempts)
        elif outcome in ("pending", "delayed"):
            self.stats.retried += 1
            log.info("job %s failed (attempt %d); will retry", lease.id, lease.attempts)
            if outcome == "delayed":
                self._poke_idle()
        elif outcome == "stale":
            self.stats.stale += 1
            log.warning("job %s: fail refused as stale: the lease had been taken away", lease.id)
        else:
            log.info("job %s failed: %s", lease.id, outcome)

    # --- renewals and deadlines ---------------------------------------------------------

    async def _queue_visibility(self, default: float) -> float:
        try:
            return (await self.queue.settings()).visibility_timeout_ms / 1000
        except Exception:
            return default

    async def _renew_loop(self) -> None:
        loop = asyncio.get_running_loop()
        delay = _Delay()
        wait = self._lease_s / 3
        while True:
            # A job whose own lease is shorter than the worker's is renewed as often.
            shortest = min((f.lease_s for f in self._inflight.values()), default=self._lease_s)
            await asyncio.sleep(min(wait, max(shortest / 3, 0.01)))
            if self.visibility is None:
                try:
                    self._lease_s = (await asyncio.wait_for(self.queue.settings(), max(self._lease_s / 3, 0.01))).visibility_timeout_ms / 1000
                except Exception:
                    pass
            interval = max(self._lease_s / 3, 0.01)
            lease_s = self._lease_s
            sent = loop.time()
            held = [f for f in self._inflight.values() if not f.completing and f.lost_at is None and sent < f.deadline]
            if not held:
                wait = interval
                continue
            budget = min(f.deadline for f in held) - sent
            try:
                results: List[int] = []
                for i in range(0, len(held), MAX_BATCH):
                    part = held[i : i + MAX_BATCH]
                    results += await asyncio.wait_for(self.queue.extend([f.lease for f in part], max(1, int(lease_s * 1000))), budget)
            except (asyncio.TimeoutError,) + TRANSIENT as err:
                self.stats.redis_errors += 1
                wait = min(delay.next(), interval)
                log.warning("lease renewal failed (%s); retrying in %.2fs", err or "no reply before the earliest local deadline", wait)
                continue
            except Exception as err:
                self.stats.redis_errors += 1
                wait = interval
                log.error("lease renewal failed: %s", err)
                continue
            delay.reset()
            self.stats.renewals += 1
            wait = interval
            now = loop.time()
            for f, until in zip(held, results):
                if until != 0:
                    f.deadline = max(f.deadline, local_deadline(sent, min(lease_s, f.lease_s)))
                if f.completing or f.lost_at is not None:
                    continue
                if until == -1:
                    log.info("job %s: its cancellation was asked for; stopping it", f.lease.id)
                    f.cancelled = True
                    f.lost_at = now
                    if f.task is not None:
                        f.task.cancel()
                elif until == 0:
                    log.warning("job %s: lease renewal came back stale: the lease was taken away; cancelling the job", f.lease.id)
                    f.lost_at = now
                    if f.task is not None:
                        f.task.cancel()
            assert self._wake_watcher is not None
            self._wake_watcher.set()

    async def _watch_deadlines(self) -> None:
        """Cancels a handler whose lease's local deadline passed without a renewal, and
        abandons one still running ``lease_grace`` after it was cancelled."""
        assert self._wake_watcher is not None
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            nxt: Optional[float] = None
            for f in list(self._inflight.values()):
                if f.completing:
                    continue
                if f.lost_at is None:
                    if now >= f.deadline:
                        log.warning("job %s: the lease's local deadline passed without a renewal; cancelling the job", f.lease.id)
                        f.lost_at = now
                        if f.task is not None:
                            f.task.cancel()
                        at = now + self.lease_grace
                    else:
                        at = f.deadline
                elif now >= f.lost_at + self.lease_grace:
                    if f.task is not None and not f.task.done():
                        log.warning("job %s still ran after its lease was lost and the grace passed; abandoning it", f.lease.id)
                        self._abandon(f)
                    continue
                else:
                    at = f.lost_at + self.lease_grace
                nxt = at if nxt is None else min(nxt, at)
            self._wake_watcher.clear()
            try:
                await asyncio.wait_for(self._wake_watcher.wait(), None if nxt is None else max(nxt - loop.time(), 0))
            except asyncio.TimeoutError:
                pass

    def _abandon(self, f: _InFlight) -> None:
        """A handler that ignores its cancellation: stop waiting for it and free its slot
        (Python cannot stop a coroutine that will not stop)."""
        f.completing = True
        self.stats.lost += 1
        self._inflight.pop((f.lease.id_bytes, f.lease.token), None)
        self._poke_claimer()

    # --- the reaper ---------------------------------------------------------------------

    def _reap_interval(self) -> float:
        base = min(max(self._lease_s / 2, 0.1), 60.0)
        return base * random.uniform(0.75, 1.25)

    async def _reap_loop(self) -> None:
        assert self._shutdown is not None
        wait = self._reap_interval() * random.random()
        while not self._shutdown.is_set():
            await self._sleep_or_shutdown(wait)
            if self._shutdown.is_set():
                return
            wait = self._reap_interval()
            try:
                requeued = dead = 0
                for _ in range(REAP_CALLS):
                    r = await self.queue.reap(REAP_BATCH)
                    requeued += r.requeued
                    dead += r.dead_lettered
                    if not r.more:
                        break
                self.stats.reaped += requeued + dead
                if requeued + dead:
                    log.info("reaped expired leases: requeued=%d dead_lettered=%d", requeued, dead)
            except Exception as err:
                self.stats.redis_errors += 1
                log.warning("reap failed: %s", err)

    # --- shutdown -----------------------------------------------------------------------

    async def _wait_for_jobs(self) -> None:
        """After the last claim: end what was handed to the claim loop, wait for the jobs
        in flight up to ``shutdown_timeout`` (or a second signal), then cancel what still
        runs and release it."""
        assert self._hard_stop is not None and self._wake_completer is not None
        loop = asyncio.get_running_loop()
        self._endings_open = False
        self._direct.extend(self._endings)
        self._endings = []
        await self._complete_direct()
        log.info("shutting down: no more claims, waiting for %d job(s) in flight", len(self._inflight))
        deadline = loop.time() + self.shutdown_timeout
        while self._inflight and loop.time() < deadline and not self._hard_stop.is_set():
            self._wake_completer.clear()
            await self._complete_direct()
            running = [f.task for f in self._inflight.values() if f.task is not None and not f.task.done()]
            waits = [asyncio.ensure_future(self._hard_stop.wait())]
            try:
                await asyncio.wait(running + waits, timeout=min(0.05, max(deadline - loop.time(), 0)), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            await asyncio.sleep(0)
            await self._complete_direct()
        if self._inflight:
            left = [f for f in self._inflight.values() if not f.completing]
            for f in left:
                log.warning("job %s: shutdown deadline passed: cancelling and releasing it", f.lease.id)
                if f.task is not None:
                    f.task.cancel()
            runners = [f.runner for f in left if f.runner is not None]
            if runners:
                await asyncio.wait(runners, timeout=ABORT_GRACE)
            # Their releases (sent by this loop or the completer) are answered, or give up.
            give_up = loop.time() + ABORT_GRACE
            while any(f.completing for f in self._inflight.values()) and loop.time() < give_up:
                await self._complete_direct()
                await asyncio.sleep(0.01)
            for f in left:
                if f.runner is not None and not f.runner.done():
                    log.warning("job %s still runs after its cancellation; leaving its lease to expire", f.lease.id)
