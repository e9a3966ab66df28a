import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Queue, replies } from '../src';
import { RedisServer } from './support';

let server: RedisServer;
let q: Queue;
before(async () => {
  server = await RedisServer.start();
  q = Queue.connect('producer', { url: server.url });
});
after(async () => {
  await q.close();
  server.stop();
});

test('enqueue one job, then a batch; ids generated or given; duplicates answered false', async () => {
  const one = await q.enqueue('hello');
  assert.equal(typeof one.id, 'string');
  assert.match(one.id as string, /^[0-9A-Za-z]{12}$/);
  assert.equal(one.added, true);
  const many = await q.enqueueMany([{ payload: 'a', id: 'a' }, { payload: 'b', id: 'b' }, { payload: Buffer.from([0, 255]) }]);
  assert.deepEqual(many.slice(0, 2), [{ id: 'a', added: true }, { id: 'b', added: true }]);
  assert.equal((await q.enqueue('again', { id: 'a' })).added, false);
  const s = await q.stats();
  assert.equal(s.pending, 4);
  assert.equal(s.enqueued, 4);
  const claimed = await q.claim(10, 'w');
  assert.deepEqual(claimed.leases.map((l) => l.payload.toString('hex')), ['hello', 'a', 'b'].map((p) => Buffer.from(p).toString('hex')).concat(['00ff']));
});

test('delays and run-at times put jobs in delayed, due on the Redis clock', async () => {
  const q2 = new Queue(q.client, 'delays');
  await q2.enqueue('later', { id: 'd1', delayMs: 60_000 });
  await q2.enqueue('past', { id: 'd2', at: new Date(Date.now() - 1000) });
  await q2.enqueue('at', { id: 'd3', at: Date.now() + 3_600_000 });
  const s = await q2.stats();
  assert.equal(s.delayed, 2);
  assert.equal(s.pending, 1);
  const c = q.client;
  const runAt = Number(await c.hget(q2.keys.job('d3') as string, 'run_at'));
  assert.ok(Math.abs(runAt - (Date.now() + 3_600_000)) < 60_000);
  assert.ok((await q2.nextDueIn())! > 50_000);
});

test('per-job options are written into the job; runs of equal options share a call', async () => {
  const q3 = new Queue(q.client, 'options');
  const r = await q3.enqueueMany([
    { payload: 'x', id: 'o1', maxAttempts: 2, backoffMultiplier: '1.5' },
    { payload: 'y', id: 'o2', maxAttempts: 2, backoffMultiplier: '1.5' },
    { payload: 'z', id: 'o3' },
  ]);
  assert.ok(r.every((e) => e.added));
  assert.equal(await q.client.hget(q3.keys.job('o2') as string, 'max_attempts'), '2');
  assert.equal(await q.client.hget(q3.keys.job('o1') as string, 'backoff_multiplier'), '1.5');
  assert.equal(await q.client.hget(q3.keys.job('o3') as string, 'max_attempts'), null);
});

test('bad input is refused with a clear error and writes nothing', async () => {
  const q4 = new Queue(q.client, 'bad');
  await assert.rejects(q4.enqueue('x', { id: '' }), /invalid id/);
  await assert.rejects(q4.enqueue('x', { delayMs: -1 }), /invalid delayMs/);
  await assert.rejects(q4.enqueue('x', { delayMs: 1.5 }), /invalid delayMs/);
  await assert.rejects(q4.enqueue('x', { maxAttempts: 0 }), /invalid max_attempts/);
  assert.deepEqual(await q.client.keys('jq:{bad}:*'), []);
  const small = new Queue(q.client, { tag: 'bad', maxPayload: 3 });
  await assert.rejects(small.enqueue('four'), /invalid payload/);
});

test('settle_claim acks, fails and claims in one call; its reply is read in one place', async () => {
  const q5 = new Queue(q.client, 'settle');
  await q5.enqueueMany([1, 2, 3].map((i) => ({ payload: `p${i}`, id: `j${i}` })));
  const first = await q5.settleClaim({ request: 'r1', n: 2, worker: 'w', visibilityMs: 10_000, acks: [], fails: [] });
  assert.deepEqual(first.leases.map((l) => l.id.toString()), ['j1', 'j2']);
  const second = await q5.settleClaim({
    request: 'r2', n: 1, worker: 'w', visibilityMs: 10_000,
    acks: [first.leases[0]], fails: [{ lease: first.leases[1], error: 'boom', mode: 'dead' }],
  });
  assert.deepEqual(second.acked, [true]);
  assert.deepEqual(second.failed, ['dead']);
  assert.deepEqual(second.leases.map((l) => l.id.toString()), ['j3']);
  const s = await q5.stats();
  assert.equal(s.acked, 1);
  assert.equal(s.dead, 1);
  assert.deepEqual(replies.parseExtend([5, 0, -1]).map((r) => r.kind), ['renewed', 'stale', 'cancelled']);
});

test('unique keys: a held key refuses the next job and names its holder; debounce replaces the waiting holder', async () => {
  const qu = new Queue(q.client, 'unique');
  const first = await qu.enqueue('a', { id: 'u1', unique: { key: 'report:7', mode: 'until-done' } });
  assert.equal(first.added, true);
  const second = await qu.enqueue('b', { id: 'u2', unique: { key: 'report:7', mode: 'until-done' } });
  assert.equal(second.added, false);
  assert.equal(second.unique?.outcome, 'refused');
  assert.equal(second.unique?.holder.toString(), 'u1');
  await qu.enqueue('v1', { id: 'd1', unique: { key: 'search', mode: 'debounce', forMs: 60_000 } });
  const replaced = await qu.enqueue('v2', { id: 'd2', unique: { key: 'search', mode: 'debounce', forMs: 60_000 } });
  assert.equal(replaced.unique?.outcome, 'replaced');
  assert.equal(await q.client.hget(qu.keys.job('d1') as string, 'payload'), 'v2');
  // Jobs with and without keys in one batch: split into calls that each carry a key per job or none.
  const mixed = await qu.enqueueMany([{ payload: 'x', unique: { key: 'k1' } }, { payload: 'y' }, { payload: 'z', unique: { key: 'k1' } }]);
  assert.deepEqual(mixed.map((m) => m.added), [true, true, false]);
  await assert.rejects(qu.enqueue('x', { unique: { key: '' } }), /invalid unique_key/);
});
