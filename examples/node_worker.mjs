// A jobqueue worker in Node.js (clients/node): runs each job of the queue `emails`, 8 at a
// time; a throw retries the job by the queue's backoff, DeadLetter dead-letters it, and
// `signal` fires before the lease can end. SIGTERM stops it gracefully.
//   cd clients/node && npm ci && npm run build && cd ../.. && node examples/node_worker.mjs
import { createRequire } from 'node:module';
const { Queue, Worker, DeadLetter } = createRequire(import.meta.url)('../clients/node/dist/src/index.js');

const queue = Queue.connect('emails', { url: process.env.JOBQUEUE_REDIS_URL ?? 'redis://127.0.0.1:6379' });
await queue.enqueue(JSON.stringify({ to: 'ada@example.com' }));
const worker = new Worker(queue, async (job, signal) => {
  const { to } = JSON.parse(job.payload.toString());
  if (!to) throw new DeadLetter('no recipient');
  console.log(`sending to ${to} (attempt ${job.attempts})`, signal.aborted ? 'stopped' : '');
}, { concurrency: 8 });
await worker.run();
await queue.close();
