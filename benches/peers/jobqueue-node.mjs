// The Node.js package's worker (clients/node, built into clients/node/dist) for
// `make bench-peers`, beside bullmq.mjs on the same private redis-server: the jobs are
// already in the queue (benches/peers.rs fills it), a Worker with concurrency C and an
// empty async handler, everything else its defaults, timed from its creation to the N-th
// ack.
//
//   node jobqueue-node.mjs process --port P --jobs N --concurrency C [--tag bench]
//
// Prints one JSON line: {"system":"jobqueue-node","mode":"process","jobs":…,"seconds":…}.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Queue, Worker } = require('../../clients/node/dist/src/index.js');

function parse(argv) {
  const [mode, ...rest] = argv;
  const opts = { mode, port: 6379, jobs: 1000, concurrency: 1, tag: 'bench' };
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '');
    if (!(key in opts) || key === 'mode') throw new Error(`bad argument ${rest[i]}: expected --port, --jobs, --concurrency or --tag`);
    opts[key] = key === 'tag' ? rest[i + 1] : Number(rest[i + 1]);
  }
  if (mode !== 'process') throw new Error(`unknown mode ${mode}: expected process`);
  return opts;
}

async function main() {
  const opts = parse(process.argv.slice(2));
  const queue = Queue.connect(opts.tag, { url: `redis://127.0.0.1:${opts.port}` });
  await queue.client.ping();
  let done;
  const all = new Promise((resolve) => { done = resolve; });
  let completed = 0;
  const start = process.hrtime.bigint();
  const worker = new Worker(queue, async () => {}, { concurrency: opts.concurrency, handleSignals: false });
  worker.on('completed', () => {
    if (++completed === opts.jobs) done();
  });
  const running = worker.run();
  await all;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await worker.close();
  await running;
  await queue.close();
  console.log(JSON.stringify({ system: 'jobqueue-node', mode: 'process', jobs: opts.jobs, seconds }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
