// The tests' set-up: private redis-servers on free loopback ports (never 6379), a
// 3-master Cluster, the repository's jobqueue binary, and `eventually`.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect as connectTcp, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import Redis from 'ioredis';

export const REPO = resolve(__dirname, '..', '..', '..', '..');

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

/** Wait until `check` returns a truthy value (or stops throwing); fail after `timeoutMs`. */
export async function eventually<T>(what: string, check: () => T | Promise<T>, timeoutMs = 15_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}: last ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export class RedisServer {
  private constructor(readonly port: number, private readonly proc: ChildProcess, private readonly dir: string) {}

  static async start(extra: string[] = []): Promise<RedisServer> {
    const bin = process.env.REDIS_SERVER ?? 'redis-server';
    for (let attempt = 0; attempt < 10; attempt++) {
      const port = await freePort();
      const dir = mkdtempSync(join(tmpdir(), 'jobqueue-node-'));
      const proc = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--logfile', join(dir, 'redis.log'), ...extra], { stdio: 'ignore' });
      const server = new RedisServer(port, proc, dir);
      const up = await server.waitUp();
      if (up) return server;
      server.stop();
    }
    throw new Error('could not start redis-server');
  }

  private async waitUp(): Promise<boolean> {
    const until = Date.now() + 10_000;
    while (Date.now() < until && this.proc.exitCode === null) {
      // A raw PING: +PONG, or -NOAUTH from a server with a password, says it is up.
      const answer = await new Promise<string>((resolve) => {
        const s = connectTcp(this.port, '127.0.0.1', () => s.write('PING\r\n'));
        s.once('data', (d) => {
          resolve(d.toString());
          s.destroy();
        });
        s.once('error', () => resolve(''));
      });
      if (answer.startsWith('+PONG') || answer.startsWith('-NOAUTH')) return true;
      await new Promise((r) => setTimeout(r, 20));
    }
    return false;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** A plain connection for checks (no password). */
  client(): Redis {
    return new Redis({ port: this.port, host: '127.0.0.1' });
  }

  stop() {
    this.proc.kill('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export class RedisCluster {
  private constructor(readonly nodes: RedisServer[]) {}

  static async start(): Promise<RedisCluster> {
    const nodes: RedisServer[] = [];
    const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
    for (let i = 0; i < 3; i++) {
      const bus = await freePort();
      nodes.push(await RedisServer.start(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-port', String(bus), '--cluster-node-timeout', '5000']));
    }
    const conns = nodes.map((n) => n.client());
    for (let i = 0; i < 3; i++) {
      await conns[i].call('CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1));
      await conns[i].call('CLUSTER', 'ADDSLOTSRANGE', String(ranges[i][0]), String(ranges[i][1]));
    }
    for (let i = 1; i < 3; i++) {
      const bus = (await conns[i].call('CONFIG', 'GET', 'cluster-port')) as string[];
      await conns[0].call('CLUSTER', 'MEET', '127.0.0.1', String(nodes[i].port), bus[1]);
    }
    for (const c of conns) {
      await eventually('the cluster to form', async () => {
        const info = (await c.call('CLUSTER', 'INFO')) as string;
        return info.includes('cluster_state:ok') && info.includes('cluster_known_nodes:3');
      }, 30_000);
    }
    conns.forEach((c) => c.disconnect());
    return new RedisCluster(nodes);
  }

  get url(): string {
    return this.nodes.map((n) => n.url).join(',');
  }

  stop() {
    this.nodes.forEach((n) => n.stop());
  }
}

/** The repository's jobqueue binary (JOBQUEUE_BIN, else CARGO_TARGET_DIR's or target/'s debug build). */
export function jobqueueBin(): string | undefined {
  const candidates = [
    process.env.JOBQUEUE_BIN,
    process.env.CARGO_TARGET_DIR && join(process.env.CARGO_TARGET_DIR, 'debug', 'jobqueue'),
    join(REPO, 'target', 'debug', 'jobqueue'),
  ];
  return candidates.find((c): c is string => !!c && existsSync(c));
}

/** Run the jobqueue CLI to completion. */
export function jobqueue(args: string[], env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const bin = jobqueueBin();
  if (!bin) throw new Error('the jobqueue binary is missing: cargo build --bin jobqueue (or set JOBQUEUE_BIN)');
  const r = spawnSync(bin, args, { encoding: 'utf8', env: { ...process.env, ...env } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A CA `ca`, a server certificate for 127.0.0.1 `server`, and a client certificate `client`, in a scratch directory. */
export function makeCerts(): { dir: string; path: (f: string) => string } {
  const dir = mkdtempSync(join(tmpdir(), 'jobqueue-node-certs-'));
  const ssl = (...args: string[]) => {
    const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
  };
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=jobqueue test ca', '-keyout', 'ca.key', '-out', 'ca.crt');
  const issue = (name: string, cn: string, ext: string) => {
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${cn}`, '-keyout', `${name}.key`, '-out', `${name}.csr`);
    require('node:fs').writeFileSync(join(dir, `${name}.ext`), ext);
    ssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-extfile', `${name}.ext`, '-out', `${name}.crt`);
  };
  issue('server', '127.0.0.1', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  issue('client', 'client', 'extendedKeyUsage=clientAuth\n');
  return { dir, path: (f) => join(dir, f) };
}

/** A Sentinel (`redis-server --sentinel`) watching the primary on `primaryPort` as `mymaster`, quorum 1. */
export async function startSentinel(primaryPort: number): Promise<{ port: number; stop: () => void }> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'jobqueue-node-sentinel-'));
  const conf = join(dir, 'sentinel.conf');
  require('node:fs').writeFileSync(conf, [
    `port ${port}`, 'bind 127.0.0.1', 'protected-mode no', `dir ${dir}`, `logfile ${join(dir, 'sentinel.log')}`,
    `sentinel monitor mymaster 127.0.0.1 ${primaryPort} 1`,
    'sentinel down-after-milliseconds mymaster 1000',
    'sentinel failover-timeout mymaster 3000',
  ].join('\n') + '\n');
  const proc = spawn(process.env.REDIS_SERVER ?? 'redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => 20 });
  c.on('error', () => {});
  await eventually('the Sentinel to know its replica', async () => {
    const replicas = (await c.call('SENTINEL', 'REPLICAS', 'mymaster')) as unknown[];
    return replicas.length > 0;
  }, 20_000);
  c.disconnect();
  return {
    port,
    stop: () => {
      proc.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
