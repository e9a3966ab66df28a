import assert from 'node:assert/strict';
import { test } from 'node:test';
import Redis from 'ioredis';
import { Queue, Worker } from '../src';
import { eventually, freePort, makeCerts, RedisServer, startSentinel } from './support';

const quiet = { info() {}, warn() {}, error() {} };

test('TLS with a client certificate: jobs enqueued and run; without the certificate, refused', async () => {
  const certs = makeCerts();
  const tlsPort = await freePort();
  const server = await RedisServer.start([
    '--tls-port', String(tlsPort), '--tls-cert-file', certs.path('server.crt'), '--tls-key-file', certs.path('server.key'),
    '--tls-ca-cert-file', certs.path('ca.crt'), '--tls-auth-clients', 'yes',
  ]);
  try {
    const tls = { caFile: certs.path('ca.crt'), certFile: certs.path('client.crt'), keyFile: certs.path('client.key') };
    const q = Queue.connect('tls', { url: `rediss://127.0.0.1:${tlsPort}`, tls });
    const w = new Worker(q, () => {}, { handleSignals: false, logger: quiet });
    const done = w.run();
    await q.enqueueMany([{ payload: 'a' }, { payload: 'b' }]);
    await eventually('2 acks', async () => (await q.stats()).acked === 2);
    await w.close();
    await done;
    await q.close();
    const stranger = Queue.connect('tls', { url: `rediss://127.0.0.1:${tlsPort}`, tls: { caFile: certs.path('ca.crt') }, redisOptions: { maxRetriesPerRequest: 0, retryStrategy: () => null } });
    stranger.client.on('error', () => {});
    await assert.rejects(stranger.stats());
    stranger.client.disconnect();
  } finally {
    server.stop();
  }
});

test('Sentinel: the worker follows the primary through a failover; every job runs', async () => {
  const primary = await RedisServer.start(['--repl-ping-replica-period', '1']);
  const replica = await RedisServer.start(['--replicaof', '127.0.0.1', String(primary.port), '--repl-ping-replica-period', '1']);
  const sentinel = await startSentinel(primary.port);
  try {
    const conn = { sentinels: `127.0.0.1:${sentinel.port}`, masterName: 'mymaster' };
    const q = Queue.connect('sentinel', conn);
    const seen = new Set<string>();
    const w = new Worker(q, (job) => {
      seen.add(job.payload.toString());
    }, { handleSignals: false, logger: quiet, visibilityMs: 2000 });
    const done = w.run();
    await q.enqueueMany([{ payload: 'before-1' }, { payload: 'before-2' }]);
    await eventually('the first jobs run', () => seen.size === 2);
    const s = new Redis({ port: sentinel.port, host: '127.0.0.1' });
    // Accepted once the Sentinel sees the replica in sync.
    await eventually('a failover accepted', async () => (await s.call('SENTINEL', 'FAILOVER', 'mymaster')) === 'OK', 20_000);
    await eventually('the replica promoted', async () => {
      const addr = (await s.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'mymaster')) as string[];
      return Number(addr[1]) === replica.port;
    }, 20_000);
    s.disconnect();
    await eventually('a job enqueued after the failover', async () => {
      await q.enqueue('after', { id: 'after' });
      return true;
    }, 20_000);
    await eventually('the job after the failover run', () => seen.has('after'), 20_000);
    await w.close();
    await done;
    await q.close();
  } finally {
    sentinel.stop();
    replica.stop();
    primary.stop();
  }
});
