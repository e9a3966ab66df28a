"""A minimal client of the protocol with redis-py, on private redis-servers.

JOBQUEUE_CONFORMANCE_MODE picks where the cases run: `standalone` (the default), one
redis-server; `cluster`, a 3-master Redis Cluster (redis-server --cluster-enabled yes,
joined by CLUSTER MEET and ADDSLOTSRANGE), reached through redis-py's RedisCluster so
that every EVALSHA and every direct command goes to the node of its keys. The servers
are started on free loopback ports (REDIS_SERVER or redis-server on PATH) and stopped by
stop_server(); nothing here touches a server that was already running.
"""
import atexit, os, shutil, socket, subprocess, tempfile, time

import redis
from redis.cluster import RedisCluster

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lua')
NAMES = ['enqueue', 'claim', 'settle_claim', 'ack', 'extend', 'fail', 'reap', 'stats', 'redrive',
         'purge', 'preview', 'manage', 'schedule']
MODE = os.environ.get('JOBQUEUE_CONFORMANCE_MODE', 'standalone')
if MODE not in ('standalone', 'cluster'):
    raise SystemExit(f'conformance: JOBQUEUE_CONFORMANCE_MODE={MODE!r}: expected standalone or cluster')
CLUSTER = MODE == 'cluster'


def _free_port(cluster_bus=False):
    """A loopback port nobody listens on; with cluster_bus, its bus port (+10000) too."""
    while True:
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
        if not cluster_bus:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket() as b:
            try:
                b.bind(('127.0.0.1', port + 10000))
            except OSError:
                continue
        return port


def _spawn(workdir, extra=(), cluster_bus=False):
    """One redis-server in workdir: (process, port), once it answers PING."""
    binary = os.environ.get('REDIS_SERVER', 'redis-server')
    for _ in range(20):
        port = _free_port(cluster_bus)
        proc = subprocess.Popen(
            [binary, '--port', str(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
             '--dir', workdir, '--logfile', os.path.join(workdir, f'redis-{port}.log'), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.ping()
                client.close()
                return proc, port
            except redis.ConnectionError:
                time.sleep(0.01)
        proc.kill()
        proc.wait()
    raise SystemExit('conformance: could not start redis-server')


def _start_cluster(workdir):
    """Three masters, 16384 slots split between them, joined by CLUSTER MEET; returns the
    processes and a RedisCluster client once every node says cluster_state:ok."""
    procs, ports = [], []
    for i in range(3):
        proc, port = _spawn(workdir, ['--cluster-enabled', 'yes', '--cluster-node-timeout', '5000',
                                      '--cluster-config-file', f'nodes-{i}-{os.getpid()}.conf'],
                            cluster_bus=True)
        procs.append(proc)
        ports.append(port)
    nodes = [redis.Redis(port=p) for p in ports]
    bounds = [0, 5461, 10923, 16384]
    for i, node in enumerate(nodes):
        node.execute_command('CLUSTER', 'ADDSLOTSRANGE', bounds[i], bounds[i + 1] - 1)
        if i:
            node.execute_command('CLUSTER', 'MEET', '127.0.0.1', ports[0])
    deadline = time.monotonic() + 30
    while True:
        states = [n.execute_command('CLUSTER', 'INFO') for n in nodes]
        if isinstance(states[0], bytes):
            states = [s.decode() for s in states]
        known = [len(n.execute_command('CLUSTER', 'NODES').splitlines()) for n in nodes]
        if all('cluster_state:ok' in s for s in states) and all(k == 3 for k in known):
            break
        if time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise SystemExit(f'conformance: the cluster did not come up: {states}')
        time.sleep(0.05)
    for n in nodes:
        n.close()
    return procs, RedisCluster(host='127.0.0.1', port=ports[0])


def _start():
    workdir = tempfile.mkdtemp(prefix='jobqueue-conformance-')
    if CLUSTER:
        procs, client = _start_cluster(workdir)
        return procs, client, workdir
    proc, port = _spawn(workdir)
    return [proc], redis.Redis(port=port), workdir


_procs, r, _workdir = _start()


def stop_server():
    for p in _procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(_workdir, ignore_errors=True)


atexit.register(stop_server)
# On a Cluster, redis-py sends SCRIPT LOAD to every primary: each node has the scripts.
SHAS = {n: r.script_load(open(f"{LUA}/{n}.lua", "rb").read()) for n in NAMES}


def node_of(key):
    """A client of the one server that holds `key` (the server itself when standalone),
    for commands about a server rather than a key (INFO, SCRIPT KILL)."""
    if not CLUSTER:
        return r
    node = r.get_node_from_key(key)
    return r.get_redis_connection(node)

def now_ms():
    s, us = r.time()
    return s * 1000 + us // 1000


def wait_ms(ms):
    """Wait until Redis's clock (the scripts' clock) has moved on by `ms` milliseconds."""
    until = now_ms() + ms
    deadline = time.monotonic() + 10
    while now_ms() <= until:
        assert time.monotonic() < deadline, 'the Redis clock did not move'
        time.sleep(0.001)

def lease_token(claimed_at, worker, token):
    """The claim_token claim writes: <claimed_at>:<#worker>:<worker>:<token>."""
    w = worker if isinstance(worker, bytes) else worker.encode()
    t = token if isinstance(token, bytes) else token.encode()
    return str(claimed_at).encode() + b':' + str(len(w)).encode() + b':' + w + b':' + t


def parse_token(claim_token):
    """(claimed_at, worker, token) of a claim_token as claim writes it."""
    at, rest = claim_token.split(b':', 1)
    n, rest = rest.split(b':', 1)
    n = int(n)
    assert rest[n:n + 1] == b':', claim_token
    return int(at), rest[:n], rest[n + 1:]


class Q:
    def __init__(self, tag, prefix='jq'):
        self.p = f'{prefix}:{{{tag}}}:'
        self.K = [self.p + x for x in ['pending', 'processing', 'delayed', 'dead', 'meta', 'stats', 'wake']]
        (self.pending, self.processing, self.delayed, self.dead, self.meta, self.stats_key, self.wake) = self.K
        self.jp = self.p + 'job:'
        self.orphans = self.p + 'orphans'
    def jk(self, id):
        if isinstance(id, bytes): return self.jp.encode() + id
        return self.jp + id
    def ev(self, name, extra_keys, *args, keys=None):
        k = self.K if keys is None else keys
        return r.evalsha(SHAS[name], len(k) + len(extra_keys), *k, *extra_keys, self.jp, *args)
    def enqueue(self, jobs):
        args = []
        for j in jobs:
            args += list(j)
        return self.ev('enqueue', [self.jk(j[0]) for j in jobs], len(jobs), *args)
    def claimreq(self, request):
        return self.p + 'claimreq:' + request
    def claim_reply(self, n, worker='w1', vis=0, tokens=None, request=None):
        """The whole reply: [jobs, more]. A fresh request id unless one is given."""
        if tokens is None: tokens = [os.urandom(16).hex() for _ in range(n)]
        if request is None: request = os.urandom(16).hex()
        return self.ev('claim', [self.orphans, self.claimreq(request)], n, worker, vis, request, *tokens)
    def claim(self, n, worker='w1', vis=0, tokens=None, request=None):
        """The jobs of the reply."""
        jobs, more = self.claim_reply(n, worker, vis, tokens, request)
        return jobs
    def settle_claim_flat(self, n, acks=(), fails=(), worker='w1', vis=0, request=None):
        """The reply as the script gives it: more, the leases' token, the ack results, the
        fail outcomes, then id, payload, attempts, lease_until per leased job."""
        if request is None: request = os.urandom(16).hex()
        args = [x for a in acks for x in a] + [x for f in fails for x in f]
        return self.ev('settle_claim', [self.orphans, self.claimreq(request)], n, worker, vis,
                       request, len(acks), len(fails), *args)
    def settle_claim(self, n, acks=(), fails=(), worker='w1', vis=0, request=None):
        """The reply as [jobs, more, acked, failed], each job [id, payload, attempts, token,
        lease_until] as claim gives it (and timeout_ms, visibility_timeout_ms after them for
        a job with its own, as claim). acks: (id, token) pairs; fails: (id, token, error,
        mode, backoff) quintuples. A fresh request id unless given."""
        flat = self.settle_claim_flat(n, acks, fails, worker, vis, request)
        a, f = len(acks), len(fails)
        more, token = flat[0], flat[1]
        rest = flat[2 + a + f:]
        # one array more at the end when a leased job has its own options
        opts = rest.pop() if len(rest) % 4 == 1 else None
        jobs = [[rest[i], rest[i + 1], rest[i + 2], token, rest[i + 3]]
                for i in range(0, len(rest), 4)]
        if opts is not None:
            for c, job in enumerate(jobs):
                if opts[2 * c] or opts[2 * c + 1]:
                    job += [opts[2 * c], opts[2 * c + 1]]
        return [jobs, more, flat[2:2 + a], flat[2 + a:2 + a + f]]
    def ack(self, pairs):
        args = []
        for p in pairs: args += list(p)
        return self.ev('ack', [self.jk(p[0]) for p in pairs], len(pairs), *args)
    def extend(self, ms, pairs):
        args = []
        for p in pairs: args += list(p)
        return self.ev('extend', [self.jk(p[0]) for p in pairs], ms, len(pairs), *args)
    def fail(self, id, token, err='boom', mode='retry', backoff=-1):
        return self.ev('fail', [self.jk(id)], id, token, err, mode, backoff)
    def release_(self, id, token):
        return self.ev('fail', [self.jk(id)], id, token, '', 'release', 0)
    def reap_reply(self, batch=100):
        """The whole reply: [requeued, dead_lettered, more, promoted, restored]."""
        return self.ev('reap', [self.orphans], batch)
    def reap(self, batch=100):
        """The first three: [requeued, dead_lettered, more]."""
        return self.reap_reply(batch)[:3]
    def stats(self):
        a = self.ev('stats', [self.orphans])
        return {a[i].decode(): a[i + 1] for i in range(0, len(a), 2)}
    def redrive_ids(self, ids):
        return self.ev('redrive', [self.jk(i) for i in ids], 'ids', *ids)
    def redrive_oldest(self, n):
        return self.ev('redrive', [], 'oldest', n)
    def purge_ids(self, ids):
        return self.ev('purge', [self.jk(i) for i in ids], 'ids', *ids)
    def purge_oldest(self, n):
        return self.ev('purge', [], 'oldest', n)
    def purge_orphans(self, n):
        return self.ev('purge', [self.orphans], 'orphans', n)
    def tok(self, id):
        """The claim_token of job `id`: the token of its lease (or of its last one)."""
        return r.hget(self.jk(id), 'claim_token')
    def restamp(self, id, claimed_at):
        """Move the lease of `id` to have been claimed at `claimed_at`: its claim_token is
        rewritten, and the new token (the one ack must send) returned."""
        _, w, t = parse_token(r.hget(self.jk(id), 'claim_token'))
        tok = lease_token(claimed_at, w, t)
        r.hset(self.jk(id), 'claim_token', tok)
        return tok
    def job(self, id):
        return {k.decode(): v for k, v in r.hgetall(self.jk(id)).items()}
    def snapshot(self):
        out = {}
        for k in sorted(r.scan_iter(match=self.p.replace('{', '\\{').replace('}', '\\}') + '*', count=1000)):
            out[k] = (r.type(k), r.dump(k), r.pttl(k) > 0)
        return out
    def clear(self):
        ks = list(r.scan_iter(match=self.p.replace('{', '\\{').replace('}', '\\}') + '*', count=1000))
        if ks: r.delete(*ks)


# The registry of checks: @test adds a function; test_scripts.py runs them in order.
TESTS = []


def test(f):
    TESTS.append(f)
    return f


def err_of(fn):
    try:
        fn()
    except redis.ResponseError as e:
        return str(e)
    raise AssertionError('expected an error')


def fresh(tag):
    q = Q(tag)
    q.clear()
    return q


# The same cases through the Node package's script-calling layer (scripts/conformance-node.sh).
if os.environ.get('JOBQUEUE_CONFORMANCE_NODE'):
    import node_bridge
    atexit.register(node_bridge.install(Q, r, os.environ['JOBQUEUE_CONFORMANCE_NODE']).stop)
