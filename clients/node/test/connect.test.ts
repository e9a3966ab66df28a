import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Queue, Worker } from '../src';
import { eventually, RedisCluster, RedisServer } from './support';

const quiet = { info() {}, warn() {}, error() {} };

test('a password and an ACL user: the queue and the worker connect; a wrong password is refused', async () => {
  const server = await RedisServer.start(['--requirepass', 'sekret']);
  try {
    const admin = Queue.connect('acl', { url: server.url, password: 'sekret' });
    await admin.client.call('ACL', 'SETUSER', 'jobs', 'on', '>jobs-pass', '~jq:*', '&*', '+@all');
    const q = Queue.connect('acl', { url: `redis://jobs:jobs-pass@127.0.0.1:${server.port}` });
    const w = new Worker(q, () => {}, { handleSignals: false, logger: quiet });
    const done = w.run();
    await q.enqueueMany([{ payload: 'a' }, { payload: 'b' }]);
    await eventually('2 acks', async () => (await q.stats()).acked === 2);
    await w.close();
    await done;
    const wrong = Queue.connect('acl', { url: server.url, username: 'jobs', password: 'nope', redisOptions: { maxRetriesPerRequest: 0, retryStrategy: () => null } });
    wrong.client.on('error', () => {});
    await assert.rejects(wrong.stats(), /WRONGPASS|NOAUTH|Connection is closed/);
    wrong.client.disconnect();
    await q.close();
    await admin.close();
  } finally {
    server.stop();
  }
});

test('a 3-master Cluster: queues on different slots, jobs enqueued and run', async () => {
  const cluster = await RedisCluster.start();
  try {
    const tags = ['alpha', 'beta', 'gamma', 'delta'];
    const queues = tags.map((t) => Queue.connect(t, { url: cluster.url, cluster: true }));
    const workers = queues.map((q) => new Worker(q, () => {}, { handleSignals: false, logger: quiet, concurrency: 4, visibilityMs: 2000 }));
    const runs = workers.map((w) => w.run());
    for (const q of queues) await q.enqueueMany(Array.from({ length: 20 }, (_, i) => ({ payload: String(i), delayMs: i % 4 === 0 ? 50 : 0 })));
    for (const q of queues) await eventually(`20 acks on ${q.name}`, async () => (await q.stats()).acked === 20);
    await Promise.all(workers.map((w) => w.close()));
    await Promise.all(runs);
    // The queues' keys live on more than one master, each queue's on one.
    let holding = 0;
    for (const node of cluster.nodes) {
      const c = node.client();
      if ((await c.dbsize()) > 0) holding++;
      c.disconnect();
    }
    assert.ok(holding >= 2, `keys on ${holding} masters`);
    // The idle wait's read of the earliest delayed job works on a Cluster too.
    await queues[0].enqueue('later', { delayMs: 60_000 });
    assert.ok((await queues[0].nextDueIn())! > 50_000);
    assert.equal(await queues[1].nextDueIn(), null);
    await Promise.all(queues.map((q) => q.close()));
  } finally {
    cluster.stop();
  }
});
