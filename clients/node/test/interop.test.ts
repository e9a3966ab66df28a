// The Node package and the Rust CLI on one queue: each one's jobs run by the other, and a
// Node worker SIGKILLed mid-job has its job finished by a Rust worker once the lease ends.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Queue, Worker } from '../src';
import { eventually, jobqueue, jobqueueBin, RedisServer } from './support';

let server: RedisServer;
before(async () => {
  server = await RedisServer.start();
});
after(() => server.stop());

const quiet = { info() {}, warn() {}, error() {} };
const FIXTURE = join(__dirname, 'fixtures', 'worker-proc.js');

function rustWorker(tag: string, out: string, extra: string[] = []) {
  return spawn(jobqueueBin()!, ['worker', '--redis', server.url, '--tag', tag, ...extra, '--exec', 'sh', '-c', `{ cat; echo " $JOBQUEUE_ATTEMPT"; } >> ${out}`], { stdio: 'ignore' });
}

test('jobs enqueued by `jobqueue enqueue` are run by the Node worker', async () => {
  for (const p of ['one', 'two', 'three']) {
    const r = jobqueue(['enqueue', '--redis', server.url, '--tag', 'rust-to-node', p]);
    assert.equal(r.status, 0, r.stderr);
  }
  const q = Queue.connect('rust-to-node', { url: server.url });
  const seen: string[] = [];
  const w = new Worker(q, (job) => {
    seen.push(job.payload.toString());
  }, { handleSignals: false, logger: quiet });
  const done = w.run();
  await eventually('3 acks', async () => (await q.stats()).acked === 3);
  await w.close();
  await done;
  assert.deepEqual(seen.sort(), ['one', 'three', 'two']);
  await q.close();
});

test('jobs enqueued by the Node package are run by `jobqueue worker --exec`', async () => {
  const out = join(mkdtempSync(join(tmpdir(), 'jq-interop-')), 'out');
  const q = Queue.connect('node-to-rust', { url: server.url });
  await q.enqueueMany([{ payload: 'a' }, { payload: 'b', delayMs: 100 }, { payload: 'c', id: 'given', maxAttempts: 2 }]);
  const proc = rustWorker('node-to-rust', out);
  try {
    await eventually('3 acks', async () => (await q.stats()).acked === 3);
  } finally {
    proc.kill('SIGTERM');
  }
  assert.deepEqual(readFileSync(out, 'utf8').trim().split('\n').sort(), ['a 1', 'b 1', 'c 1']);
  await q.close();
});

test("a Node worker SIGKILLed mid-job: a Rust worker finishes its job after the lease expires", async () => {
  const tag = 'killed';
  const q = Queue.connect(tag, { url: server.url });
  await q.configure({ visibility_timeout_ms: 1000 });
  await q.enqueue('payload', { id: 'k' });
  const node = spawn(process.execPath, [FIXTURE, server.url, tag, 'hang', '1000'], { stdio: 'ignore' });
  await eventually('the Node worker running the job', () => q.client.get('started:k'));
  node.kill('SIGKILL');
  const out = join(mkdtempSync(join(tmpdir(), 'jq-interop-')), 'out');
  const rust = rustWorker(tag, out);
  try {
    await eventually('the job acked by the Rust worker', async () => (await q.stats()).acked === 1, 20_000);
  } finally {
    rust.kill('SIGTERM');
  }
  assert.equal(readFileSync(out, 'utf8').trim(), 'payload 2');
  assert.equal((await q.stats()).reaped, 1);
  await q.close();
});

test('SIGTERM: a Node worker process finishes its job, acks it and exits 0', async () => {
  const tag = 'sigterm';
  const q = Queue.connect(tag, { url: server.url });
  await q.enqueue('x', { id: 's' });
  const node = spawn(process.execPath, [FIXTURE, server.url, tag, 'slow', '5000'], { stdio: ['ignore', 'pipe', 'ignore'] });
  let stdout = '';
  node.stdout!.on('data', (d) => (stdout += d));
  await eventually('the job started', () => q.client.get('started:s'));
  const exited = new Promise<number | null>((r) => node.on('exit', r));
  node.kill('SIGTERM');
  assert.equal(await exited, 0);
  assert.equal(JSON.parse(stdout).acked, 1);
  assert.equal((await q.stats()).acked, 1);
  await q.close();
});

test('the binary is there', () => {
  assert.ok(jobqueueBin() && existsSync(jobqueueBin()!), 'build it: cargo build --bin jobqueue');
});
