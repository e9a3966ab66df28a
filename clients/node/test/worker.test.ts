import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DeadLetter, LeaseLost, Queue, Worker, type Handler, type Job, type WorkerOptions } from '../src';
import { eventually, RedisServer } from './support';

let server: RedisServer;
let client: Queue['client'];
before(async () => {
  server = await RedisServer.start();
  client = Queue.connect('x', { url: server.url }).client;
});
after(async () => {
  client.disconnect();
  server.stop();
});

const quiet = { info() {}, warn() {}, error() {} };

function start(tag: string, handler: Handler, opts: WorkerOptions = {}) {
  const q = new Queue(client, tag);
  const w = new Worker(q, handler, { handleSignals: false, logger: quiet, ...opts });
  const done = w.run();
  return { q, w, done };
}

test('every job runs once, never more than `concurrency` at a time', async () => {
  let running = 0;
  let most = 0;
  const seen = new Map<string, number>();
  const { q, w } = start('bounded', async (job) => {
    running++;
    most = Math.max(most, running);
    seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
    await sleep(5);
    running--;
  }, { concurrency: 8 });
  await q.enqueueMany(Array.from({ length: 200 }, (_, i) => ({ payload: String(i), id: `j${i}` })));
  await eventually('200 acks', async () => (await q.stats()).acked === 200);
  await w.close();
  assert.ok(most <= 8 && most > 1, `at most 8 at once, got ${most}`);
  assert.equal(seen.size, 200);
  assert.ok([...seen.values()].every((n) => n === 1));
  const s = await q.stats();
  assert.equal(s.processing, 0);
  assert.equal(s.stale ?? 0, 0);
});

test("a failing job is retried by the queue's settings, then dead-lettered; DeadLetter at once", async () => {
  const attempts: number[] = [];
  const q = new Queue(client, 'failing');
  await q.configure({ max_attempts: 3, backoff_initial_ms: 0 });
  const { w } = start('failing', async (job) => {
    if (job.id === 'now') throw new DeadLetter('bad payload');
    attempts.push(job.attempts);
    throw new Error('boom');
  });
  await q.enqueue('x', { id: 'j' });
  await q.enqueue('y', { id: 'now' });
  await eventually('two dead jobs', async () => (await q.stats()).dead === 2);
  await w.close();
  assert.deepEqual(attempts, [1, 2, 3]);
  const job = await client.hgetall(q.keys.job('j') as string);
  assert.equal(job.status, 'dead');
  assert.equal(job.last_error, 'boom');
  assert.equal(await client.hget(q.keys.job('now') as string, 'attempts'), '1');
  assert.equal(w.counters.retried, 2);
  assert.equal(w.counters.dead, 2);
});

test('a job longer than its lease is renewed and its signal never fires', async () => {
  let aborted = true;
  const { q, w } = start('renewed', async (_job, signal) => {
    await sleep(900);
    aborted = signal.aborted;
  }, { visibilityMs: 300 });
  await q.enqueue('x', { id: 'long' });
  await eventually('the ack', async () => (await q.stats()).acked === 1);
  await w.close();
  assert.equal(aborted, false);
  assert.ok(w.counters.renewals >= 2, `renewals: ${w.counters.renewals}`);
  assert.equal((await q.stats()).stale ?? 0, 0);
});

test("the signal fires at the lease's local deadline when renewals get no answer; the job runs again", async () => {
  const reasons: string[] = [];
  const { q, w } = start('deadline', async (job: Job, signal) => {
    if (job.attempts > 1) return;
    const admin = server.client();
    await admin.call('CLIENT', 'PAUSE', '1500', 'WRITE');
    admin.disconnect();
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
    reasons.push((signal.reason as LeaseLost).why);
  }, { visibilityMs: 500 });
  await q.enqueue('x', { id: 'cut-off' });
  await eventually('the second run acked', async () => (await q.stats()).acked === 1, 20_000);
  await w.close();
  assert.deepEqual(reasons, ['deadline']);
  // The first lease, and maybe a claim answered after the pause, past its deadline.
  assert.ok(w.counters.lost >= 1);
  assert.equal((await q.stats()).reaped, 1);
});

test("a cancelled job's signal fires and its lease ends as cancelled", async () => {
  let why = '';
  const { q, w } = start('cancel', async (_job, signal) => {
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
    why = (signal.reason as LeaseLost).why;
    throw signal.reason;
  }, { visibilityMs: 300 });
  await q.enqueue('x', { id: 'c' });
  await eventually('the job leased', async () => (await q.stats()).processing === 1);
  assert.equal(await q.cancel('c'), 'processing');
  await eventually('the job cancelled', async () => (await q.stats()).cancelled === 1);
  await w.close();
  assert.equal(why, 'cancelled');
  assert.equal(w.counters.cancelled, 1);
});

test('a job past timeoutMs is stopped and failed, then retried', async () => {
  const q = new Queue(client, 'timeout');
  await q.configure({ backoff_initial_ms: 0 });
  const { w } = start('timeout', async (job, signal) => {
    if (job.attempts > 1) return;
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
    throw new Error('stopped');
  }, { timeoutMs: 150 });
  const errors: string[] = [];
  w.on('failed', (_id, error) => errors.push(error));
  await q.enqueue('x', { id: 't' });
  await eventually('the retry acked', async () => (await q.stats()).acked === 1);
  await w.close();
  assert.equal(w.counters.retried, 1);
  assert.deepEqual(errors, ['timed out after 150 ms']);
});

test('shutdown lets jobs in flight finish and acks them', async () => {
  const { q, w } = start('graceful', async () => {
    await sleep(300);
  }, { concurrency: 4 });
  await q.enqueueMany([1, 2, 3].map((i) => ({ payload: 'x', id: `g${i}` })));
  await eventually('3 leased', async () => (await q.stats()).processing === 3);
  await w.close();
  const s = await q.stats();
  assert.equal(s.acked, 3);
  assert.equal(s.processing, 0);
});

test('past the shutdown deadline a job that stops is released, its attempt not charged', async () => {
  const { q, w } = start('deadline-release', async (_job, signal) => {
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
    throw signal.reason;
  }, { shutdownTimeoutMs: 100 });
  await q.enqueue('x', { id: 'r' });
  await eventually('leased', async () => (await q.stats()).processing === 1);
  await w.close();
  const s = await q.stats();
  assert.equal(s.released, 1);
  assert.equal(s.pending, 1);
  assert.equal(await client.hget(q.keys.job('r') as string, 'attempts'), '0');
});

test("the worker's reaper puts back the job of a worker that died, and runs it", async () => {
  const q = new Queue(client, 'reaped');
  await q.enqueue('x', { id: 'orphaned' });
  const claimed = await q.claim(1, 'died', 200);
  assert.equal(claimed.leases.length, 1);
  const runs: number[] = [];
  const { w } = start('reaped', (job) => {
    runs.push(job.attempts);
  }, { visibilityMs: 400 });
  await eventually('the job run again', async () => (await q.stats()).acked === 1);
  await w.close();
  assert.deepEqual(runs, [2]);
  assert.ok(w.counters.reaped >= 1);
});

/** A queue whose settle_claim replies are lost after the call ran, `lose` times. */
class LosingQueue extends Queue {
  lose = 0;
  override async settleClaim(p: Parameters<Queue['settleClaim']>[0]) {
    const reply = await super.settleClaim(p);
    if (this.lose > 0 && (p.acks.length > 0 || reply.leases.length > 0)) {
      this.lose--;
      throw new Error('connection lost (the reply of a call that ran)');
    }
    return reply;
  }
}

test('a settle_claim whose reply was lost is sent again with its request id: settled once, its leases run once', async () => {
  const q = new LosingQueue(client, 'lost-replies');
  q.lose = 4;
  const runs = new Map<string, number>();
  const w = new Worker(q, (job) => {
    runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
  }, { handleSignals: false, logger: quiet, concurrency: 4 });
  const done = w.run();
  await q.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ payload: 'x', id: `l${i}` })));
  await eventually('40 acks', async () => (await q.stats()).acked === 40);
  await w.close();
  await done;
  const s = await q.stats();
  assert.equal(q.lose, 0);
  assert.equal(s.replayed, 4);
  assert.equal(s.stale ?? 0, 0);
  assert.equal(s.claimed, 40);
  assert.equal(runs.size, 40);
  assert.ok([...runs.values()].every((n) => n === 1), 'every job ran once');
  assert.equal(w.counters.acked, 40);
});

test('ids of any bytes (not UTF-8, 1024 bytes) and binary payloads reach the handler exactly and are acked', async () => {
  const ids = [Buffer.from([0xff, 0x00, 0xfe]), Buffer.alloc(1024, 0x61)];
  const payload = Buffer.from([0, 1, 2, 0xff]);
  const got: Buffer[] = [];
  const { q, w } = start('binary-ids', (job) => {
    assert.ok(job.payload.equals(payload));
    got.push(job.idBytes);
  });
  const added = await q.enqueueMany(ids.map((id) => ({ id, payload })));
  assert.ok(added.every((a) => a.added));
  await eventually('2 acks', async () => (await q.stats()).acked === 2);
  await w.close();
  assert.deepEqual(got.map((b) => b.toString('hex')).sort(), ids.map((b) => b.toString('hex')).sort());
  await assert.rejects(q.enqueue('x', { id: Buffer.alloc(1025, 0x61) }), /invalid id/);
});
