"""The client of one queue: producers' calls (enqueue, stats) and the low-level calls a
worker makes (claim, settle_claim, ack, extend, fail, reap), each parsing its script's
reply in exactly one place (docs/protocol.md, Scripts in detail).

Replies are read tolerantly where the protocol lets them grow: extra fields at the end
of a claimed job or of reap's reply are ignored, an unknown stats field is kept, and a
fail outcome this client does not know is returned as it is.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import os
import secrets
import string
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .connection import ConnectOptions, connect, is_cluster
from .keys import DEFAULT_PREFIX, Id, QueueKeys, id_bytes, id_text, validate_id
from .scripts import Arg, Scripts

#: Most jobs one script call takes (enqueue, claim, ack, extend, settle_claim).
MAX_BATCH = 1000
#: A lost claim or settle_claim is resent with its request id only within this window
#: (half the request record's 60 s life).
REQUEST_RETRY_WINDOW = 30.0

_BASE62 = string.digits + string.ascii_letters
_OPTION_NAMES = ("max_attempts", "backoff_initial_ms", "backoff_max_ms", "backoff_multiplier")


def new_id() -> str:
    """12 characters of base62 (about 71 random bits), as the Rust client makes."""
    n = int.from_bytes(os.urandom(16), "big")  # 128 bits: the 12 digits are uniform to 2^-56
    out = []
    for _ in range(12):
        n, d = divmod(n, 62)
        out.append(_BASE62[d])
    return "".join(out)


def new_token() -> str:
    """128 random bits in hex: a claim slot token or a request id."""
    return secrets.token_hex(16)


class ProtocolError(Exception):
    """A script's reply this client cannot read."""


def _ms(seconds: Union[float, _dt.timedelta]) -> int:
    if isinstance(seconds, _dt.timedelta):
        seconds = seconds.total_seconds()
    ms = int(round(seconds * 1000))
    if ms < 0:
        raise ValueError(f"invalid duration: {seconds!r} is negative")
    return ms


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


@dataclass
class Job:
    """A job to enqueue. ``delay`` (seconds or a timedelta) or ``at`` (a datetime, or
    ms since the epoch on the Redis clock); ``id`` is drawn when not given. The retry
    policy fields override the queue's for this job (docs/protocol.md, Per-job options)."""

    payload: Union[bytes, str]
    id: Optional[Id] = None
    delay: Union[float, _dt.timedelta, None] = None
    at: Union[_dt.datetime, int, None] = None
    max_attempts: Optional[int] = None
    backoff_initial: Union[float, _dt.timedelta, None] = None
    backoff_max: Union[float, _dt.timedelta, None] = None
    backoff_multiplier: Optional[float] = None
    #: A unique key (docs/protocol.md, Unique keys): at most one job of the queue holds
    #: it; ``unique_mode`` ``until-done`` (default), ``until-started`` or ``debounce``;
    #: ``unique_for`` a window (seconds) after which the key is free anyway.
    unique_key: Optional[Id] = None
    unique_mode: str = "until-done"
    unique_for: Union[float, _dt.timedelta, None] = None

    def unique(self) -> Optional[Tuple[str, str]]:
        """(mode, window ms) of the job's unique block, or None without a key."""
        if self.unique_key is None:
            return None
        return self.unique_mode, str(_ms(self.unique_for) if self.unique_for is not None else 0)

    def delay_arg(self) -> Arg:
        if self.at is not None and self.delay is not None:
            raise ValueError("invalid job: give delay or at, not both")
        if self.at is not None:
            at = self.at
            if isinstance(at, _dt.datetime):
                if at.tzinfo is None:
                    raise ValueError("invalid at: a datetime needs a time zone (e.g. timezone.utc)")
                at = int(at.timestamp() * 1000)
            return f"@{int(at)}"
        return str(_ms(self.delay)) if self.delay is not None else "0"

    def options(self) -> Tuple[Tuple[str, str], ...]:
        out: List[Tuple[str, str]] = []
        if self.max_attempts is not None:
            out.append(("max_attempts", str(int(self.max_attempts))))
        if self.backoff_initial is not None:
            out.append(("backoff_initial_ms", str(_ms(self.backoff_initial))))
        if self.backoff_max is not None:
            out.append(("backoff_max_ms", str(_ms(self.backoff_max))))
        if self.backoff_multiplier is not None:
            m = self.backoff_multiplier
            out.append(("backoff_multiplier", str(int(m)) if float(m).is_integer() else repr(float(m))))
        return tuple(out)


@dataclass(frozen=True)
class Enqueued:
    id: str
    #: False when a job with this (caller-given) id was already there, or its unique key
    #: is held by another job.
    created: bool
    #: The job that holds the unique key: refused (``created`` False), or, in
    #: ``debounce`` mode, the waiting job that took this one's payload and delay.
    held_by: Optional[str] = None
    #: ``debounce``: the holder was updated instead.
    replaced: bool = False


@dataclass
class Lease:
    """A claimed job: run it, then ack or fail it with its token before ``lease_until``
    (ms on the Redis clock), or extend the lease."""

    id_bytes: bytes
    payload: bytes
    attempts: int
    token: bytes
    lease_until: int
    #: Reply fields this client does not read (a newer protocol's), as they came.
    extra: List[Any] = field(default_factory=list)

    @property
    def id(self) -> str:
        return id_text(self.id_bytes)

    @property
    def claimed_at(self) -> Optional[int]:
        """When the lease was granted (ms, Redis clock): the claim_token's first part,
        read only as 1 to 16 decimal digits (docs/protocol.md, Job hash)."""
        head = self.token.split(b":", 1)[0]
        return int(head) if 1 <= len(head) <= 16 and head.isdigit() and b":" in self.token else None

    @property
    def granted_ms(self) -> Optional[int]:
        """The lease length Redis granted (lease_until - claimed_at), whatever was asked:
        a job may carry its own."""
        at = self.claimed_at
        return None if at is None else self.lease_until - at


@dataclass
class Claimed:
    leases: List[Lease]
    #: Ready work may be left beyond the call's bounds: claim again at once.
    more: bool
    #: The queue's rate limit had no slot left: the ms to wait before claiming again
    #: (a negative ``more`` in the reply); 0 otherwise.
    wait_ms: int = 0


@dataclass(frozen=True)
class Fail:
    """A lease to fail in a settle_claim: ``mode`` ``retry``, ``dead`` or ``release``;
    ``backoff_ms`` -1 for the queue's (or job's) policy."""

    lease: Lease
    error: str
    mode: str = "retry"
    backoff_ms: int = -1


@dataclass
class SettleReply:
    claimed: Claimed
    #: One per ack: True acked, False stale.
    acked: List[bool]
    #: One per fail: ``pending``, ``delayed``, ``dead`` or ``stale``.
    failed: List[str]


@dataclass(frozen=True)
class Reaped:
    requeued: int
    dead_lettered: int
    more: bool
    promoted: int = 0
    restored: int = 0


@dataclass
class Settings:
    visibility_timeout_ms: int = 30000
    max_attempts: int = 5
    raw: Dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# Reply parsing: one function per script.


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"{what}: expected an integer, got {v!r}")
    return v


def parse_lease(v: Any) -> Lease:
    """One job of claim's reply: ``{id, payload, attempts, token, lease_until, …}``
    (fields after the fifth are ignored)."""
    if not isinstance(v, list) or len(v) < 5:
        raise ProtocolError(f"claim: a job reply of {v!r}")
    return Lease(bytes(v[0]), bytes(v[1]), _int(v[2], "attempts"), bytes(v[3]), _int(v[4], "lease_until"), list(v[5:]))


def _more(v: Any) -> Tuple[bool, int]:
    """claim's and settle_claim's ``more``: 1 more work, 0 none, below 0 the rate
    limit's wait in ms."""
    more = _int(v, "more")
    return more == 1, max(0, -more)


def parse_claim(reply: Any) -> Claimed:
    if not isinstance(reply, list) or len(reply) < 2 or not isinstance(reply[0], list):
        raise ProtocolError(f"claim: {reply!r}")
    more, wait = _more(reply[1])
    return Claimed([parse_lease(j) for j in reply[0]], more, wait)


#: settle_claim's entries per leased job after its head: id, payload, attempts, lease_until.
SETTLE_JOB_FIELDS = 4


def parse_settle_claim(reply: Any, acks: int, fails: int) -> SettleReply:
    """settle_claim's flat reply: more, the leases' token, the ack results, the fail
    outcomes, then ``SETTLE_JOB_FIELDS`` entries per leased job. Arrays after those (a
    newer protocol's per-job fields) are kept, in order, as the leases' ``extra``."""
    head = 2 + acks + fails
    if not isinstance(reply, list) or len(reply) < head:
        raise ProtocolError(f"settle_claim: {reply!r} for {acks} acks and {fails} fails")
    entries = list(reply[head:])
    extras: List[Any] = []
    while entries and isinstance(entries[-1], list):
        extras.insert(0, entries.pop())
    if len(entries) % SETTLE_JOB_FIELDS:
        raise ProtocolError(f"settle_claim: {len(reply)} entries for {acks} acks and {fails} fails")
    more, wait = _more(reply[0])
    token = bytes(reply[1])
    acked = [_int(v, "ack result") == 1 for v in reply[2 : 2 + acks]]
    failed = [_text(v) for v in reply[2 + acks : head]]
    leases = []
    for n, i in enumerate(range(0, len(entries), SETTLE_JOB_FIELDS)):
        extra = [extras[n]] if len(extras) == len(entries) // SETTLE_JOB_FIELDS else []
        leases.append(Lease(bytes(entries[i]), bytes(entries[i + 1]), _int(entries[i + 2], "attempts"), token,
                            _int(entries[i + 3], "lease_until"), extra))
    return SettleReply(Claimed(leases, more, wait), acked, failed)


def parse_reap(reply: Any) -> Reaped:
    if not isinstance(reply, list) or len(reply) < 3:
        raise ProtocolError(f"reap: {reply!r}")
    n = [_int(v, "reap") for v in reply[:5]]
    n += [0] * (5 - len(n))
    return Reaped(n[0], n[1], n[2] == 1, n[3], n[4])


def parse_stats(reply: Any) -> Dict[str, int]:
    """stats' flat ``name, value, …``; values that are not integers are skipped."""
    if not isinstance(reply, list) or len(reply) % 2:
        raise ProtocolError(f"stats: {reply!r}")
    out: Dict[str, int] = {}
    for i in range(0, len(reply), 2):
        if isinstance(reply[i + 1], int):
            out[_text(reply[i])] = reply[i + 1]
    return out


def parse_enqueue(reply: Any, n: int) -> List[Tuple[int, Optional[bytes]]]:
    """enqueue's entries: 1 enqueued, 0 already there, ``{2, holder}`` refused (unique
    key held), ``{3, holder}`` replaced (debounce)."""
    if not isinstance(reply, list) or len(reply) != n:
        raise ProtocolError(f"enqueue: {reply!r} for {n} jobs")
    out: List[Tuple[int, Optional[bytes]]] = []
    for v in reply:
        if isinstance(v, list) and len(v) >= 2:
            out.append((_int(v[0], "enqueue"), bytes(v[1])))
        else:
            out.append((_int(v, "enqueue"), None))
    return out


def parse_ints(reply: Any, n: int, script: str) -> List[int]:
    if not isinstance(reply, list) or len(reply) != n:
        raise ProtocolError(f"{script}: {reply!r} for {n} jobs")
    return [_int(v, script) for v in reply]


# ---------------------------------------------------------------------------------------


class Queue:
    """One queue (``prefix`` and hash ``tag``) on a redis-py asyncio client (standalone,
    Cluster or Sentinel: see :func:`jobqueue.connect`)."""

    def __init__(self, client: Any, tag: str, prefix: str = DEFAULT_PREFIX, scripts: Optional[Scripts] = None) -> None:
        self.client = client
        self.keys = QueueKeys.new(tag, prefix)
        self.scripts = scripts or Scripts()
        self.tag = tag

    @classmethod
    def connect(cls, tag: str, url: Optional[str] = None, prefix: str = DEFAULT_PREFIX, **options: Any) -> "Queue":
        """A queue on a new client: ``Queue.connect("emails", "redis://localhost:6379")``;
        the other :class:`ConnectOptions` fields as keywords (``cluster=True``, ...)."""
        return cls(connect(ConnectOptions(url=url, **options)), tag, prefix)

    @property
    def name(self) -> str:
        return self.keys.name

    async def aclose(self) -> None:
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()

    async def run(self, script: str, extra_keys: Sequence[Arg], *args: Arg) -> Any:
        """The low-level call: script ``script`` with the seven queue keys, then
        ``extra_keys``; ARGV is the job-key prefix, then ``args``."""
        keys = [*self.keys.queue_keys(), *extra_keys]
        return await self.scripts.call(self.client, script, keys, [self.keys.job_prefix, *args])

    # --- producers -----------------------------------------------------------------

    async def enqueue(self, payload: Union[bytes, str], **job: Any) -> Enqueued:
        """Enqueue one job; keywords as :class:`Job`'s fields."""
        return (await self.enqueue_many([Job(payload, **job)]))[0]

    async def enqueue_many(self, jobs: Iterable[Job]) -> List[Enqueued]:
        """Enqueue jobs in as few calls as possible: runs of jobs with the same options,
        at most 1000 per call. A generated id that was taken is drawn again."""
        jobs = list(jobs)
        prepared: List[Tuple[bytes, bytes, Arg, Any, bool]] = []
        for j in jobs:
            payload = j.payload.encode() if isinstance(j.payload, str) else bytes(j.payload)
            given = j.id is not None
            raw = validate_id(j.id) if j.id is not None else new_id().encode()
            # jobs of one call share their options and their unique block's mode and window
            group = (j.options(), j.unique(), id_bytes(j.unique_key) if j.unique_key is not None else None)
            prepared.append((raw, payload, j.delay_arg(), group, given))
        results: List[Optional[Enqueued]] = [None] * len(prepared)
        todo = list(range(len(prepared)))
        while todo:
            retry: List[int] = []
            for run in self._runs(todo, prepared):
                opts, unique, _ = prepared[run[0]][3]
                args: List[Arg] = [len(run)]
                for i in run:
                    raw, payload, delay, _, _ = prepared[i]
                    args += [raw, payload, delay]
                if unique is not None:
                    args += ["unique", unique[0], unique[1]]
                    args += [prepared[i][3][2] for i in run]
                if opts:
                    args.append("options")
                    for k, v in opts:
                        args += [k, v]
                reply = await self.run("enqueue", [self.keys.job(prepared[i][0]) for i in run], *args)
                for i, (flag, holder) in zip(run, parse_enqueue(reply, len(run))):
                    raw, payload, delay, o, given = prepared[i]
                    if flag == 0 and not given:
                        prepared[i] = (new_id().encode(), payload, delay, o, given)
                        retry.append(i)
                    else:
                        held = id_text(holder) if holder is not None else None
                        results[i] = Enqueued(id_text(raw), flag == 1, held, flag == 3)
            todo = retry
        return [r for r in results if r is not None]

    @staticmethod
    def _runs(todo: List[int], prepared: List[Any]) -> List[List[int]]:
        runs: List[List[int]] = []
        seen: "set[bytes]" = set()
        for i in todo:
            same = prepared[runs[-1][0]][3][:2] == prepared[i][3][:2] if runs else False
            if runs and same and len(runs[-1]) < MAX_BATCH and prepared[i][0] not in seen:
                runs[-1].append(i)
            else:
                runs.append([i])
                seen = set()
            seen.add(prepared[i][0])
        return runs

    async def stats(self) -> Dict[str, int]:
        """Counts (``pending``, ``processing``, ``delayed``, ``dead``, ...) and counters."""
        return parse_stats(await self.run("stats", [self.keys.orphans]))

    async def settings(self) -> Settings:
        raw = {_text(k): _text(v) for k, v in (await self.client.hgetall(self.keys.meta)).items()}

        def num(name: str, default: int, least: int) -> int:
            v = raw.get(name, "")
            return int(v) if v.isdigit() and int(v) >= least else default

        return Settings(num("visibility_timeout_ms", 30000, 1), max(num("max_attempts", 5, 0), 1), raw)

    async def configure(self, **fields: Union[int, float, str]) -> None:
        """Write queue settings (``visibility_timeout_ms``, ``max_attempts``,
        ``backoff_initial_ms``, ...) into the queue's meta."""
        if fields:
            await self.client.hset(self.keys.meta, mapping={k: str(v) for k, v in fields.items()})

    # --- workers: the low-level calls ------------------------------------------------

    async def claim(self, n: int, worker: str, visibility_ms: int = 0, request: Optional[str] = None) -> Claimed:
        request = request or new_token()
        tokens = [new_token() for _ in range(n)]
        reply = await self.run("claim", [self.keys.orphans, self.keys.claim_request(request)], n, worker, visibility_ms, request, *tokens)
        return parse_claim(reply)

    async def settle_claim(
        self,
        request: str,
        acks: Sequence[Lease],
        fails: Sequence[Fail],
        n: int,
        worker: str,
        visibility_ms: int = 0,
    ) -> SettleReply:
        """End ``acks`` and ``fails`` and claim up to ``n`` jobs, in one call. Send the
        same call (same request id and arguments) again when its reply was lost."""
        args: List[Arg] = [n, worker, visibility_ms, request, len(acks), len(fails)]
        for lease in acks:
            args += [lease.id_bytes, lease.token]
        for f in fails:
            args += [f.lease.id_bytes, f.lease.token, f.error, f.mode, f.backoff_ms]
        reply = await self.run("settle_claim", [self.keys.orphans, self.keys.claim_request(request)], *args)
        return parse_settle_claim(reply, len(acks), len(fails))

    async def ack(self, leases: Sequence[Lease]) -> List[bool]:
        args: List[Arg] = [len(leases)]
        for lease in leases:
            args += [lease.id_bytes, lease.token]
        reply = await self.run("ack", [self.keys.job(l.id_bytes) for l in leases], *args)
        return [v == 1 for v in parse_ints(reply, len(leases), "ack")]

    async def extend(self, leases: Sequence[Lease], ms: int = 0) -> List[int]:
        """New lease_until per lease; 0 stale (the lease is gone), -1 extended but the
        job's cancellation was asked for."""
        args: List[Arg] = [ms, len(leases)]
        for lease in leases:
            args += [lease.id_bytes, lease.token]
        reply = await self.run("extend", [self.keys.job(l.id_bytes) for l in leases], *args)
        return parse_ints(reply, len(leases), "extend")

    async def fail(self, lease: Lease, error: str, mode: str = "retry", backoff_ms: int = -1) -> str:
        """``pending``, ``delayed``, ``dead`` or ``stale``."""
        reply = await self.run("fail", [self.keys.job(lease.id_bytes)], lease.id_bytes, lease.token, error, mode, backoff_ms)
        return _text(reply)

    async def release(self, lease: Lease) -> bool:
        """Give back a job this worker did not finish, uncharged."""
        return await self.fail(lease, "", "release", 0) != "stale"

    async def end_cancelled(self, lease: Lease) -> bool:
        reply = await self.run("manage", [self.keys.job(lease.id_bytes)], "cancelled", lease.id_bytes, lease.token)
        return bool(reply == 1)

    async def reap(self, batch: int = 100) -> Reaped:
        return parse_reap(await self.run("reap", [self.keys.orphans], batch))

    async def now_ms(self) -> int:
        """The Redis clock of the node that holds the queue's slot."""
        if is_cluster(self.client):
            node = self.client.get_node_from_key(self.keys.pending.decode())
            s, us = await self.client.execute_command("TIME", target_nodes=node)
        else:
            s, us = await self.client.time()
        return int(s) * 1000 + int(us) // 1000

    async def next_due_in(self) -> Optional[float]:
        """Seconds until the earliest delayed job is due (0 when one is), or None."""
        first = await self.client.zrange(self.keys.delayed, 0, 0, withscores=True)
        if not first:
            return None
        now = await self.now_ms()
        return max(0.0, (float(first[0][1]) - now) / 1000)

    async def wait_for_wake(self, timeout: float) -> bool:
        """BLPOP the wake list for up to ``timeout`` seconds; True when a marker came."""
        return await self.client.blpop([self.keys.wake], timeout=max(timeout, 0.001)) is not None


TRANSIENT = (RedisConnectionError, RedisTimeoutError, asyncio.TimeoutError, OSError)
