"""A Python worker process for the interop and signal tests:
`python worker_proc.py URL TAG RECORD [VISIBILITY_S]`. Each job appends
`<id> <attempt> <payload>` to RECORD when it starts; a payload `hang` then sleeps until
cancelled, `slow` sleeps 0.5 s."""
import asyncio
import sys

import jobqueue


async def main() -> None:
    url, tag, record = sys.argv[1:4]
    visibility = float(sys.argv[4]) if len(sys.argv) > 4 else None
    queue = jobqueue.Queue.connect(tag, url)

    async def handle(job: jobqueue.Lease) -> None:
        with open(record, "a") as f:
            f.write(f"{job.id} {job.attempts} {job.payload.decode()}\n")
        if job.payload == b"hang":
            await asyncio.sleep(3600)
        elif job.payload == b"slow":
            await asyncio.sleep(0.5)

    stats = await jobqueue.Worker(queue, handle, concurrency=4, visibility=visibility).run()
    print(f"stopped: acked={stats.acked} released={stats.released}", flush=True)


asyncio.run(main())
