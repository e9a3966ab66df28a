"""Connection options: a password, an ACL user with the worker's grants of
docs/operations.md, and a 3-master Cluster (the queue's keys share its hash tag)."""
import asyncio

import pytest
import redis
import redis.asyncio as aioredis

import jobqueue
from jobqueue import Job, Worker
from support import REPO, RedisServer, eventually


def worker_acl_line(tag: str) -> str:
    """The worker's ACL line of docs/operations.md, for queue `tag`."""
    for line in (REPO / "docs" / "operations.md").read_text().splitlines():
        if line.startswith("ACL SETUSER jq-worker-emails "):
            return line.replace("{emails}", "{" + tag + "}").replace("jq-worker-emails", "pyworker").replace("WORKER-PASSWORD", "pw-worker")
    raise AssertionError("docs/operations.md has no worker ACL line")


@pytest.fixture(scope="module")
def secured():
    s = RedisServer(["--requirepass", "admin-secret"])
    admin = s.client(password="admin-secret")
    admin.execute_command(*worker_acl_line("secure").split())
    yield s
    s.stop()


async def _run_one_job(queue):
    done = asyncio.Event()

    async def handle(job):
        done.set()

    w = Worker(queue, handle, handle_signals=False)
    task = asyncio.ensure_future(w.run())
    await queue.enqueue(b"x")
    await asyncio.wait_for(done.wait(), 10)
    w.shutdown()
    return await task


async def test_a_password(secured):
    q = jobqueue.Queue.connect("pw", f"redis://:admin-secret@127.0.0.1:{secured.port}")
    assert (await q.enqueue(b"a")).created
    q2 = jobqueue.Queue.connect("pw", host="127.0.0.1", port=secured.port, password="admin-secret")
    assert (await q2.stats())["pending"] == 1
    with pytest.raises(redis.AuthenticationError):
        await jobqueue.Queue.connect("pw", f"redis://:wrong@127.0.0.1:{secured.port}").stats()


async def test_an_acl_user_with_the_documented_worker_grants_runs_a_worker(secured):
    q = jobqueue.Queue.connect("secure", host="127.0.0.1", port=secured.port, username="pyworker", password="pw-worker")
    admin = secured.client(password="admin-secret")
    admin.script_flush()  # the worker loads the scripts itself (SCRIPT LOAD, not EVAL)
    stats = await _run_one_job(q)
    assert stats.acked == 1 and stats.redis_errors == 0, stats
    with pytest.raises(redis.exceptions.NoPermissionError):
        await jobqueue.Queue(q.client, "other").stats()  # another queue's keys are not granted


async def test_a_queue_on_a_cluster(cluster):
    tags = [f"c{i}" for i in range(6)]  # spread over the three masters' slots
    slots = {redis.cluster.key_slot(f"jq:{{{t}}}:pending".encode()) * 3 // 16384 for t in tags}
    assert len(slots) > 1, "the tags land on more than one master"
    for tag in tags:
        q = jobqueue.Queue.connect(tag, cluster.url, cluster=True)
        await q.enqueue_many([Job(f"{tag}-{i}".encode()) for i in range(50)])
        await q.enqueue(b"later", delay=0.2)
        seen = []

        async def handle(job, seen=seen):
            seen.append(job.payload)

        w = Worker(q, handle, concurrency=4, visibility=2, handle_signals=False)
        task = asyncio.ensure_future(w.run())
        await eventually(lambda q=q: _acked(q, 51), f"51 jobs of {tag} acked")
        w.shutdown()
        stats = await task
        assert stats.acked == 51 and len(seen) == 51 and stats.redis_errors == 0, stats
        # the Redis clock of the node that holds the queue's slot
        assert await q.now_ms() > 0
        await q.aclose()


async def _acked(q, n):
    return (await q.stats()).get("acked", 0) >= n


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    from support import make_certs

    certs = str(tmp_path_factory.mktemp("certs"))
    make_certs(certs)
    s = RedisServer(["--tls-port", "{0}", "--tls-cert-file", f"{certs}/server.crt", "--tls-key-file",
                     f"{certs}/server.key", "--tls-ca-cert-file", f"{certs}/ca.crt", "--tls-auth-clients", "yes"], ports=1)
    s.certs = certs
    yield s
    s.stop()


async def test_mutual_tls(tls_server):
    c = tls_server.certs
    port = tls_server.others[0]
    q = jobqueue.Queue.connect("tls", f"rediss://127.0.0.1:{port}", tls_ca=f"{c}/ca.crt", tls_cert=f"{c}/client.crt",
                               tls_key=f"{c}/client.key")
    stats = await _run_one_job(q)
    assert stats.acked == 1 and stats.redis_errors == 0, stats
    no_cert = jobqueue.Queue.connect("tls", f"rediss://127.0.0.1:{port}", tls_ca=f"{c}/ca.crt")
    with pytest.raises(redis.ConnectionError):
        await no_cert.stats()  # the server asks for a client certificate


async def test_a_primary_behind_sentinel(tmp_path):
    from support import start_sentinel

    primary = RedisServer()
    sentinel = start_sentinel(str(tmp_path), primary.port)
    try:
        q = jobqueue.Queue.connect("sentinel", sentinels=[("127.0.0.1", sentinel.port)], master_name="mymaster")
        stats = await _run_one_job(q)
        assert stats.acked == 1 and stats.redis_errors == 0, stats
        assert primary.client().exists("jq:{sentinel}:stats"), "the calls went to the primary the Sentinel names"
        await q.aclose()
    finally:
        sentinel.kill()
        sentinel.wait()
        primary.stop()


async def test_a_worker_follows_the_primary_through_a_sentinel_failover(tmp_path):
    from support import start_sentinel

    primary = RedisServer()
    replica = RedisServer(["--replicaof", "127.0.0.1", str(primary.port)])
    sentinel = start_sentinel(str(tmp_path), primary.port)
    s = redis.Redis(port=sentinel.port)
    try:
        await eventually(lambda: _sentinel_knows_replica(s), "the Sentinel found the replica")
        q = jobqueue.Queue.connect("failover", sentinels=[("127.0.0.1", sentinel.port)], master_name="mymaster")
        seen = set()

        async def handle(job):
            seen.add(job.id)

        w = Worker(q, handle, visibility=2, handle_signals=False)
        task = asyncio.ensure_future(w.run())
        await q.enqueue_many([Job(b"", id=f"before-{i}") for i in range(20)])
        await eventually(lambda: _len_at_least(seen, 20), "the jobs before the failover")
        await eventually(lambda: _replica_synced(replica), "the replica in sync")
        s.execute_command("SENTINEL", "FAILOVER", "mymaster")
        await eventually(lambda: _primary_is(s, replica.port), "the replica promoted", timeout=30)
        for i in range(20):
            while True:  # a producer retries an enqueue refused during the switch
                try:
                    await q.enqueue(b"", id=f"after-{i}")
                    break
                except (redis.ConnectionError, redis.ReadOnlyError):
                    await asyncio.sleep(0.1)
        await eventually(lambda: _len_at_least(seen, 40), "the jobs after the failover, on the new primary", timeout=30)
        w.shutdown()
        stats = await asyncio.wait_for(task, 30)
        assert stats.acked >= 40, stats
        assert replica.client().exists("jq:{failover}:stats")
    finally:
        sentinel.kill()
        sentinel.wait()
        replica.stop()
        primary.stop()


async def _sentinel_knows_replica(s):
    return bool(s.execute_command("SENTINEL", "REPLICAS", "mymaster"))


async def _replica_synced(replica):
    return replica.client().info("replication").get("master_link_status") == "up"


async def _primary_is(s, port):
    addr = s.execute_command("SENTINEL", "get-master-addr-by-name", "mymaster")
    return addr is not None and int(addr[1]) == port


async def _len_at_least(x, n):
    return len(x) >= n
