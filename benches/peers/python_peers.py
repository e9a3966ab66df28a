"""`make bench-peers`, the Python side: jobqueue's Python worker (clients/python) and arq,
the same workload on one private redis-server, as BullMQ's side is run by
benches/peers.rs: N jobs with the same 45-byte JSON payload enqueued first (not timed),
then a worker with an empty async handler at concurrency 1, 16 and 64, timed from its
start to the N-th completed job. FLUSHALL before every run. Each side runs in a process
of its own, in its own virtual environment (arq pins redis-py below 6):

    python3 python_peers.py run --jobqueue-python VENV/bin/python --arq-python VENV/bin/python [--jobs N] [--quick]
    python python_peers.py jobqueue --port P --jobs N --concurrency C      (one run; prints JSON)
    python python_peers.py arq --port P --jobs N --concurrency C

Both use their library's defaults, but for arq's poll_delay, set to 0 (its default sleeps
0.5 s after each fetch of up to max_jobs jobs, which caps it at 2 jobs/s at concurrency
1); arq keeps each job's result for an hour (as BullMQ
keeps completed jobs), jobqueue deletes an acked job (completed_retention_ms 0).
"""
import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CONCURRENCY = (1, 16, 64)


def payload(i: int) -> bytes:
    return ('{"to":"u%07d@example.com","tpl":"welcome"}' % (i % 10_000_000)).encode()


async def jobqueue_side(port: int, jobs: int, concurrency: int) -> float:
    import jobqueue

    queue = jobqueue.Queue.connect("bench", f"redis://127.0.0.1:{port}")
    for i in range(0, jobs, 1000):
        await queue.enqueue_many([jobqueue.Job(payload(j)) for j in range(i, min(i + 1000, jobs))])

    async def handle(job: jobqueue.Lease) -> None:
        pass

    worker = jobqueue.Worker(queue, handle, concurrency=concurrency, handle_signals=False)
    start = time.perf_counter()
    task = asyncio.ensure_future(worker.run())
    while worker.stats.acked < jobs:
        assert not task.done(), "the worker stopped"
        await asyncio.sleep(0.002)
    seconds = time.perf_counter() - start
    worker.shutdown()
    stats = await task
    assert stats.acked == jobs, stats
    return seconds


async def noop(ctx, data):
    """arq's empty handler (arq names a function by its qualified name)."""


async def arq_side(port: int, jobs: int, concurrency: int) -> float:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    settings = RedisSettings(host="127.0.0.1", port=port)
    pool = await create_pool(settings)
    for i in range(0, jobs, 1000):
        await asyncio.gather(*(pool.enqueue_job("noop", payload(j).decode()) for j in range(i, min(i + 1000, jobs))))

    worker = Worker(functions=[noop], redis_settings=settings, max_jobs=concurrency, burst=True, handle_signals=False,
                    poll_delay=0)
    start = time.perf_counter()
    await worker.main()
    seconds = time.perf_counter() - start
    assert worker.jobs_complete == jobs and worker.jobs_failed == 0, (worker.jobs_complete, worker.jobs_failed)
    await worker.close()
    await pool.aclose()
    return seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace) -> None:
    jobs = args.jobs or (5000 if args.quick else 50_000)
    workdir = tempfile.mkdtemp(prefix="jobqueue-peers-py-")
    port = free_port()
    server = subprocess.Popen([os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", workdir],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cli = lambda *a: subprocess.run(["redis-cli", "-p", str(port), *a], capture_output=True, text=True).stdout
    try:
        deadline = time.monotonic() + 10
        while "PONG" not in cli("PING"):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
        version = [l for l in cli("INFO", "server").splitlines() if l.startswith("redis_version")]
        sides = {"jobqueue": args.jobqueue_python, "arq": args.arq_python}
        rows = []
        for c in CONCURRENCY:
            rate = {}
            for name, python in sides.items():
                cli("FLUSHALL")
                print(f"{name}, concurrency {c} …", file=sys.stderr)
                out = subprocess.run([python, os.path.abspath(__file__), name, "--port", str(port), "--jobs", str(jobs),
                                      "--concurrency", str(c)], capture_output=True, text=True, timeout=3600)
                assert out.returncode == 0, f"{name} failed: {out.stderr[-3000:]}"
                rate[name] = jobs / json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
            rows.append((c, rate["jobqueue"], rate["arq"]))
        print()
        print("| workload | unit | jobqueue (Python) | arq | jobqueue (Python) ÷ arq |")
        print("| --- | --- | ---: | ---: | ---: |")
        for c, jq, arq in rows:
            print(f"| process, empty handler, concurrency {c} | jobs/s | {jq:,.0f} | {arq:,.0f} | {jq / arq:.2f} |")
        print()
        for c, jq, arq in rows:
            print(json.dumps({"name": f"peers.python.process.c{c}", "unit": "jobs/s", "jobqueue_python": round(jq, 1),
                              "arq": round(arq, 1), "jobqueue_python_over_arq": round(jq / arq, 3)}))
        print(json.dumps({"name": "machine", "nproc": os.cpu_count(), "loadavg_at_end": open("/proc/loadavg").read().split()[:3],
                          "redis": version[0].split(":")[1].strip() if version else None, "jobs": jobs}))
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["run", "jobqueue", "arq"])
    p.add_argument("--port", type=int)
    p.add_argument("--jobs", type=int)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--jobqueue-python")
    p.add_argument("--arq-python")
    args, _ = p.parse_known_args()
    if args.mode == "run":
        run(args)
        return
    side = jobqueue_side if args.mode == "jobqueue" else arq_side
    seconds = asyncio.run(side(args.port, args.jobs, args.concurrency))
    print(json.dumps({"system": args.mode, "jobs": args.jobs, "concurrency": args.concurrency, "seconds": seconds}))


if __name__ == "__main__":
    main()
