import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NotReplicated, parseDurability, Queue, Worker } from '../src';
import { eventually, RedisServer } from './support';

const quiet = { info() {}, warn() {}, error() {} };

test('durability settings are read as the Rust client reads them; bad ones are refused', () => {
  assert.equal(parseDurability('primary'), null);
  assert.deepEqual(parseDurability('replicated'), { replicas: 1, timeoutMs: 1000 });
  assert.deepEqual(parseDurability('replicated:2:500ms'), { replicas: 2, timeoutMs: 500 });
  assert.deepEqual(parseDurability('replicated:1:2s'), { replicas: 1, timeoutMs: 2000 });
  assert.throws(() => parseDurability('replicated:x'), /invalid durability/);
});

test("replicated durability: writes wait for the replica; without one, the worker runs its jobs and counts them unconfirmed, enqueue says so", async () => {
  const primary = await RedisServer.start();
  const replica = await RedisServer.start(['--replicaof', '127.0.0.1', String(primary.port)]);
  try {
    const q = Queue.connect({ tag: 'durable', durability: 'replicated:1:2000ms' }, { url: primary.url });
    await eventually('the replica in sync', async () => (await q.client.info('replication')).includes('connected_slaves:1'));
    await eventually('a confirmed enqueue', async () => (await q.enqueue('x', { id: 'confirmed' })).id === 'confirmed');
    replica.stop();
    await eventually('the replica gone', async () => (await q.client.info('replication')).includes('connected_slaves:0'));
    const short = Queue.connect({ tag: 'durable', durability: 'replicated:1:50ms' }, { url: primary.url });
    await assert.rejects(short.enqueue('y', { id: 'unconfirmed' }), (e: unknown) => e instanceof NotReplicated && e.confirmed === 0);
    assert.equal(await q.client.exists(q.keys.job('unconfirmed') as string), 1, 'the enqueue ran on the primary');
    // The worker takes the queue's published setting.
    await q.configure({ durability: 'replicated:1:50ms' });
    const plain = Queue.connect('durable', { url: primary.url });
    const w = new Worker(plain, () => {}, { handleSignals: false, logger: quiet });
    const done = w.run();
    await eventually('both jobs acked', async () => (await plain.stats()).acked === 2);
    await w.close();
    await done;
    assert.ok(w.counters.unconfirmed >= 1, `unconfirmed: ${w.counters.unconfirmed}`);
    await Promise.all([q.close(), short.close(), plain.close()]);
  } finally {
    replica.stop();
    primary.stop();
  }
});
