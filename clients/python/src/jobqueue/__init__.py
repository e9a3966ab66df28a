"""jobqueue for Python: a producer client and an asyncio worker for jobqueue's protocol
(docs/protocol.md), on redis-py.

    queue = jobqueue.Queue.connect("emails", "redis://localhost:6379")
    await queue.enqueue(b'{"to": "a@example.com"}')

    async def handle(job: jobqueue.Lease) -> None:
        ...  # raise to retry, jobqueue.DeadLetter to dead-letter

    await jobqueue.Worker(queue, handle, concurrency=8).run()
"""
from .connection import ConnectOptions, connect
from .keys import QueueKeys
from .queue import (
    Claimed,
    Enqueued,
    Fail,
    Job,
    Lease,
    ProtocolError,
    Queue,
    Reaped,
    SettleReply,
    Settings,
    new_id,
    new_token,
)
from .scripts import ScriptError, Scripts, load_sources, lua_dir
from .worker import DeadLetter, Retry, Worker, WorkerStats

__all__ = [
    "Claimed",
    "ConnectOptions",
    "DeadLetter",
    "Enqueued",
    "Fail",
    "Job",
    "Lease",
    "ProtocolError",
    "Queue",
    "QueueKeys",
    "Reaped",
    "Retry",
    "ScriptError",
    "Scripts",
    "SettleReply",
    "Settings",
    "Worker",
    "WorkerStats",
    "connect",
    "load_sources",
    "lua_dir",
    "new_id",
    "new_token",
]
