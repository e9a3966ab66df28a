"""A jobqueue worker in Python: `pip install ./clients/python`, then
`REDIS_URL=redis://localhost:6379 python examples/python_worker.py` (jobs of the `emails`
queue; `jobqueue enqueue --tag emails '{"to": "a@example.com"}'` adds one)."""
import asyncio, json, os

import jobqueue


async def send_email(job: jobqueue.Lease) -> None:
    message = json.loads(job.payload)            # raise: retried with backoff
    if "to" not in message:
        raise jobqueue.DeadLetter("no recipient")  # straight to the dead-letter set
    print(f"job {job.id} (attempt {job.attempts}): mail to {message['to']}")


queue = jobqueue.Queue.connect("emails", os.environ.get("REDIS_URL", "redis://localhost:6379"))
asyncio.run(jobqueue.Worker(queue, send_email, concurrency=8).run())  # SIGTERM: graceful
