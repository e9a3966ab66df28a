// BullMQ's side of `make bench-peers` (benches/peers.rs runs it, one workload per process,
// on the same private redis-server as jobqueue's side). BullMQ's own scripts and defaults:
// job options left unset (so removeOnComplete and removeOnFail are BullMQ's defaults:
// completed jobs are kept), default prefix `bull`, auto-increment job ids, job name "j".
// The only connection option set is the one BullMQ requires of a Worker's connection,
// maxRetriesPerRequest: null.
//
//   node bullmq.mjs enqueue --port P --jobs N --batch 1      Queue.add, one call at a time
//   node bullmq.mjs enqueue --port P --jobs N --batch 1000   Queue.addBulk, 1000 per call
//   node bullmq.mjs process --port P --jobs N --concurrency C
//       N jobs added with addBulk first (not timed; `--fill 0`: the caller added them),
//       then a Worker with concurrency C and an empty async processor, timed from its
//       creation to the N-th 'completed' event. With --max M --duration MS the Worker
//       has BullMQ's rate limiter, `limiter: {max: M, duration: MS}` (global to the queue).
//   --priorities 1 (with either mode): the k-th batch of jobs added gets priority
//       10 - (k mod 10), BullMQ's 1 (highest) to 10, as jobqueue's side gives its k-th
//       batch priority k mod 10 (9 highest): ten levels, one per batch.
//
// Prints one JSON line: {"system":"bullmq","version":…,"mode":…,"jobs":…,"seconds":…}.
import { readFileSync } from 'node:fs';
import { Queue, Worker } from 'bullmq';

const QUEUE = 'bench';
const NAME = 'j';

function parse(argv) {
  const [mode, ...rest] = argv;
  const opts = { mode, port: 6379, jobs: 1000, batch: 1, concurrency: 1, fill: 1, priorities: 0, max: 0, duration: 0 };
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '');
    const value = Number(rest[i + 1]);
    const least = key === 'fill' || key === 'priorities' ? 0 : 1;
    if (!(key in opts) || key === 'mode' || !Number.isInteger(value) || value < least) {
      throw new Error(`bad argument ${rest[i]} ${rest[i + 1]}: expected --port, --jobs, --batch, --concurrency, --max or --duration with a positive integer, --fill 0 or --priorities 0 or 1`);
    }
    opts[key] = value;
  }
  if (mode !== 'enqueue' && mode !== 'process') {
    throw new Error(`unknown mode ${mode}: expected enqueue or process`);
  }
  return opts;
}

// The same 45-byte JSON payload as jobqueue's side: JSON.stringify of this object is
// {"to":"u0000001@example.com","tpl":"welcome"}.
function data(i) {
  return { to: `u${String(i % 10_000_000).padStart(7, '0')}@example.com`, tpl: 'welcome' };
}

async function addAll(queue, jobs, batch, priorities) {
  for (let i = 0; i < jobs; i += batch) {
    const k = Math.min(batch, jobs - i);
    // BullMQ: 1 is the highest priority; jobqueue's batch priority p is BullMQ's 10 - p
    const opts = priorities ? { priority: 10 - ((i / batch) % 10) } : undefined;
    if (k === 1) {
      await queue.add(NAME, data(i), opts);
    } else {
      const bulk = [];
      for (let j = i; j < i + k; j++) bulk.push({ name: NAME, data: data(j), opts });
      await queue.addBulk(bulk);
    }
  }
}

async function main() {
  const opts = parse(process.argv.slice(2));
  const version = JSON.parse(
    readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url)),
  ).version;
  const connection = { host: '127.0.0.1', port: opts.port };
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  let seconds;
  if (opts.mode === 'enqueue') {
    const start = process.hrtime.bigint();
    await addAll(queue, opts.jobs, opts.batch, opts.priorities);
    seconds = Number(process.hrtime.bigint() - start) / 1e9;
  } else {
    if (opts.fill) await addAll(queue, opts.jobs, 1000, opts.priorities);
    let completed = 0;
    let failed = 0;
    let done;
    const all = new Promise((resolve) => { done = resolve; });
    const start = process.hrtime.bigint();
    const worker = new Worker(QUEUE, async () => {}, {
      connection: { ...connection, maxRetriesPerRequest: null },
      concurrency: opts.concurrency,
      ...(opts.max ? { limiter: { max: opts.max, duration: opts.duration } } : {}),
    });
    worker.on('completed', () => {
      completed += 1;
      if (completed === opts.jobs) done();
    });
    worker.on('failed', () => { failed += 1; });
    await all;
    seconds = Number(process.hrtime.bigint() - start) / 1e9;
    await worker.close();
    if (failed > 0) throw new Error(`${failed} jobs failed`);
  }
  await queue.close();
  console.log(JSON.stringify({
    system: 'bullmq', version, mode: opts.mode, jobs: opts.jobs, batch: opts.batch,
    concurrency: opts.concurrency, priorities: opts.priorities, seconds,
  }));
}

main().catch((err) => {
  console.error(`bullmq.mjs: ${err.stack || err}`);
  process.exit(1);
});
