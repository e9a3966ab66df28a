"""The Python package and the Rust CLI on one queue: jobs enqueued by `jobqueue enqueue`
run by the Python worker and the other way round, and a Python worker SIGKILLed mid-job
whose job a Rust `jobqueue worker` finishes once the lease expires. Also SIGTERM: a
Python worker process finishes its job in flight."""
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import jobqueue
from jobqueue import Job, Worker
from support import eventually, jobqueue_bin

HERE = Path(__file__).resolve().parent


def cli(server, tag, *args, stdin=None):
    out = subprocess.run([jobqueue_bin(), *args[:1], "--redis", server.url, "--tag", tag, *args[1:]],
                         input=stdin, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


def python_worker(server, tag, record, visibility=None):
    args = [sys.executable, str(HERE / "worker_proc.py"), server.url, tag, str(record)]
    if visibility is not None:
        args.append(str(visibility))
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def records(path):
    return path.read_text().splitlines() if path.exists() else []


async def test_jobs_enqueued_by_the_rust_cli_run_on_the_python_worker(queue, server, tag):
    cli(server, tag, "enqueue", "--id", "from-rust", "hello from rust")
    cli(server, tag, "enqueue", "--id", "rust-delayed", "--delay", "200ms", "later")
    seen = {}

    async def handle(job):
        seen[job.id] = job.payload

    w = Worker(queue, handle, handle_signals=False)
    task = asyncio.ensure_future(w.run())
    await eventually(lambda: _len_at_least(seen, 2), "both jobs run")
    w.shutdown()
    await task
    assert seen == {"from-rust": b"hello from rust", "rust-delayed": b"later"}


async def _len_at_least(d, n):
    return len(d) >= n


async def test_jobs_enqueued_by_python_run_on_the_rust_exec_worker(queue, server, tag, tmp_path):
    out = tmp_path / "done"
    await queue.enqueue_many([Job(f"job {i}".encode(), id=f"py-{i}") for i in range(5)])
    await queue.enqueue(b"with options", id="py-opts", max_attempts=2, delay=0.1)
    rust = subprocess.Popen([jobqueue_bin(), "worker", "--redis", server.url, "--tag", tag, "--exec",
                             "sh", "-c", f'cat >> {out}; echo " $JOBQUEUE_JOB_ID" >> {out}'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await eventually(lambda: _acked(queue, 6), "six jobs acked by the Rust worker")
    finally:
        rust.send_signal(signal.SIGTERM)
        rust.wait(30)
    lines = sorted(out.read_text().splitlines())
    assert lines == sorted([f"job {i} py-{i}" for i in range(5)] + ["with options py-opts"]), lines


async def _acked(queue, n):
    return (await queue.stats()).get("acked", 0) >= n


async def test_a_python_worker_killed_mid_job_is_finished_by_a_rust_worker(queue, server, tag, tmp_path):
    record = tmp_path / "py-record"
    await queue.enqueue(b"hang", id="doomed")
    py = python_worker(server, tag, record, visibility=1.0)
    try:
        await eventually(lambda: _has(record, "doomed 1 hang"), "the Python worker started the job")
    finally:
        py.send_signal(signal.SIGKILL)
        py.wait(10)
    assert (await queue.client.hget(queue.keys.job("doomed"), "status")) == b"processing"
    out = tmp_path / "rust-done"
    rust = subprocess.Popen([jobqueue_bin(), "worker", "--redis", server.url, "--tag", tag, "--exec",
                             "sh", "-c", f'echo "$JOBQUEUE_JOB_ID $JOBQUEUE_ATTEMPT" >> {out}'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await eventually(lambda: _acked(queue, 1), "the Rust worker's reaper requeued the job and ran it", timeout=30)
    finally:
        rust.send_signal(signal.SIGTERM)
        rust.wait(30)
    assert out.read_text().split() == ["doomed", "2"], "run again once, as attempt 2"
    st = await queue.stats()
    assert st["reaped"] == 1 and st["pending"] == 0 and st["processing"] == 0, st


async def _has(path, line):
    return line in records(path)


async def test_sigterm_lets_a_python_worker_finish_its_job(queue, server, tag, tmp_path):
    record = tmp_path / "record"
    await queue.enqueue(b"slow", id="finish-me")
    py = python_worker(server, tag, record)
    await eventually(lambda: _has(record, "finish-me 1 slow"), "the job started")
    py.send_signal(signal.SIGTERM)
    out, err = py.communicate(timeout=30)
    assert py.returncode == 0, err.decode()
    assert b"acked=1" in out, (out, err)
    assert not await queue.client.exists(queue.keys.job("finish-me"))
