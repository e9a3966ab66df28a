// The worker runtime, with the Rust runtime's guarantees (src/worker/runtime.rs, lease.rs):
//
// - at most `concurrency` leases held at once: a lease's slot is free again only when its
//   ack or fail has been answered;
// - a busy worker ends the leases of finished jobs and claims the next ones in one
//   `settle_claim` call (sent again with the same request id when its reply is lost);
// - one `extend` call renews every lease in flight, at a third of the lease length;
// - each lease has a local deadline, the send time of the call that granted or last
//   renewed it plus the lease length asked for: it passes before the lease ends in Redis.
//   At the deadline the handler's AbortSignal fires and its result is never acked; a
//   handler still running `leaseGraceMs` later gives its slot back;
// - failures are retried or dead-lettered by the queue's settings (or the job's own), a
//   `DeadLetter` error dead-letters at once;
// - a reaper puts back the jobs of workers that died, about every half lease;
// - SIGTERM (and SIGINT): stop claiming, let the jobs in flight finish up to
//   `shutdownTimeoutMs`, then abort them and release what stopped (a second signal: now).
import { EventEmitter } from 'node:events';
import { setTimeout as sleepFor } from 'node:timers/promises';
import { hostname } from 'node:os';
import type { Cluster, Redis } from 'ioredis';
import type { LeaseRef } from './queue';
import { newToken, parseDurability, Queue, type FailMode, MAX_BATCH } from './queue';
import type { FailOutcome, LeaseReply } from './replies';

/** Thrown by a handler: the job goes to the dead-letter set at once, never retried. */
export class DeadLetter extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DeadLetter';
  }
}

/** Why a job's signal fired: `signal.reason` is one of these. */
export class LeaseLost extends Error {
  constructor(readonly why: 'deadline' | 'stale' | 'cancelled' | 'timeout' | 'shutdown') {
    super(`jobqueue: job stopped (${why})`);
    this.name = 'LeaseLost';
  }
}

export interface Job {
  /** The id as text (UTF-8; `idBytes` holds the exact bytes). */
  id: string;
  idBytes: Buffer;
  payload: Buffer;
  /** 1 on the first run. */
  attempts: number;
  /** Fires before the lease can end in Redis, at shutdown's deadline, on cancellation. */
  signal: AbortSignal;
  queue: string;
  workerId: string;
}

export type Handler = (job: Job, signal: AbortSignal) => unknown | Promise<unknown>;

export interface Logger {
  debug?(msg: string, fields?: object): void;
  info(msg: string, fields?: object): void;
  warn(msg: string, fields?: object): void;
  error(msg: string, fields?: object): void;
}

export interface WorkerOptions {
  concurrency?: number;
  /** The most jobs one call claims (default and at most: concurrency, 1000). */
  maxClaim?: number;
  /** Lease length; default: the queue's visibility timeout, re-read at each renewal round. */
  visibilityMs?: number;
  /** The longest a handler runs: its signal fires, then the job fails (retried). */
  timeoutMs?: number;
  /** After a lost lease's signal fired, how long before its slot is taken back (5 s). */
  leaseGraceMs?: number;
  /** How long shutdown waits for jobs in flight (30 s). */
  shutdownTimeoutMs?: number;
  /** The longest idle wait on the wake list (1 s). */
  pollIntervalMs?: number;
  /** Reap expired leases every half lease (default true). */
  reaper?: boolean;
  /** Stop gracefully on SIGTERM and SIGINT (default true). */
  handleSignals?: boolean;
  workerId?: string;
  logger?: Logger;
  /**
   * `primary` or `replicated[:N[:TIMEOUT]]`; default: the queue's own (`Queue`'s
   * `durability`), else the `durability` the operator publishes in the queue's meta.
   */
  durability?: string;
}

export interface WorkerCounters {
  claimed: number;
  acked: number;
  retried: number;
  dead: number;
  stale: number;
  lost: number;
  released: number;
  cancelled: number;
  reaped: number;
  renewals: number;
  redisErrors: number;
  /** Calls applied on the primary that too few replicas confirmed. */
  unconfirmed: number;
}

const RETRY_WINDOW_MS = 30_000;
const REAP_BATCH = 100;
const REAP_CALLS = 10;
const ABORT_GRACE_MS = 2000;
const MAX_ERROR_TEXT = 4096;

const now = () => performance.now();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref?.());

/** Connection failures and Redis's "try again" replies; not a script's own error. */
export function isTransient(err: unknown): boolean {
  if (!(err instanceof Error) || err.name === 'NotReplicated') return false;
  if (err.name !== 'ReplyError') return true;
  return /^(LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY|NOSCRIPT)/.test(err.message);
}

interface InFlight {
  lease: LeaseReply;
  key: string;
  ac: AbortController;
  deadline: number;
  timer?: NodeJS.Timeout;
  graceTimer?: NodeJS.Timeout;
  lostAt?: number;
  completing: boolean;
  cancelled: boolean;
  timedOut: boolean;
  /** Stopped at the shutdown deadline: released if it stops in time. */
  shutdownStopped: boolean;
  /** The slot was given back (the handler outlived its grace, or the lease ended). */
  freed: boolean;
}

type Ending = { f: InFlight; kind: 'ack' } | { f: InFlight; kind: 'fail'; error: string; mode: FailMode };

class Backoff {
  private next = 50;
  delay(): number {
    const d = this.next * (0.5 + Math.random());
    this.next = Math.min(this.next * 2, 5000);
    return d;
  }
  reset() {
    this.next = 50;
  }
}

const stderrLogger: Logger = {
  info: () => {},
  warn: (m, f) => process.stderr.write(`jobqueue warn: ${m}${f ? ' ' + JSON.stringify(f) : ''}\n`),
  error: (m, f) => process.stderr.write(`jobqueue error: ${m}${f ? ' ' + JSON.stringify(f) : ''}\n`),
};

function errorText(err: unknown): string {
  const text = err instanceof Error ? err.message || err.name : String(err);
  return Buffer.byteLength(text) > MAX_ERROR_TEXT ? Buffer.from(text).subarray(0, MAX_ERROR_TEXT).toString() : text;
}

export class Worker extends EventEmitter {
  readonly workerId: string;
  readonly counters: WorkerCounters = {
    claimed: 0, acked: 0, retried: 0, dead: 0, stale: 0, lost: 0, released: 0, cancelled: 0, reaped: 0, renewals: 0, redisErrors: 0, unconfirmed: 0,
  };
  private readonly concurrency: number;
  private readonly maxClaim: number;
  private readonly log: Logger;
  private leaseMs = 30_000;
  private readonly inflight = new Map<string, InFlight>();
  /** Leases held: from the claim's reply until their end's reply (the slots in use). */
  private held = 0;
  private endings: Ending[] = [];
  /** While true, finished jobs are ended by the claim loop's next call. */
  private endingsOpen = true;
  private kickResolve: (() => void) | null = null;
  private stopping = false;
  private hardStop = false;
  private renewing: Promise<void> | null = null;
  private blocker: Redis | Cluster | null = null;
  private running: Promise<void> | null = null;
  private idleResolve: (() => void) | null = null;
  private directs = new Set<Promise<unknown>>();
  private signalHandler?: () => void;
  private hardStopped!: Promise<void>;
  private hardStopResolve!: () => void;

  constructor(readonly queue: Queue, private readonly handler: Handler, private readonly opts: WorkerOptions = {}) {
    super();
    this.concurrency = opts.concurrency ?? 1;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new Error(`jobqueue: invalid concurrency: ${opts.concurrency} is not a whole number of 1 or more`);
    this.maxClaim = Math.min(opts.maxClaim ?? this.concurrency, this.concurrency, MAX_BATCH);
    if (!(this.maxClaim >= 1)) throw new Error(`jobqueue: invalid maxClaim: ${opts.maxClaim}`);
    this.workerId = opts.workerId ?? `node-${hostname()}-${process.pid}-${newToken().slice(0, 6)}`;
    this.log = opts.logger ?? stderrLogger;
    this.hardStopped = new Promise((r) => (this.hardStopResolve = r));
  }

  /** Start the worker; the promise settles once it has stopped (see `close`). */
  run(): Promise<void> {
    if (!this.running) this.running = this.main();
    return this.running;
  }

  /** Graceful shutdown (what SIGTERM does); `{ now: true }` skips the wait for jobs. */
  async close(opts: { now?: boolean } = {}): Promise<void> {
    if (opts.now) {
      this.hardStop = true;
      this.hardStopResolve();
    }
    if (!this.stopping) {
      this.stopping = true;
      this.kick();
      this.blocker?.disconnect();
    }
    await this.running;
  }

  private kick() {
    const k = this.kickResolve;
    this.kickResolve = null;
    k?.();
  }

  private waitKick(): Promise<void> {
    return new Promise((r) => (this.kickResolve = r));
  }

  private redisError(what: string, err: unknown) {
    this.counters.redisErrors++;
    this.log.warn(`${what} failed`, { queue: this.queue.name, error: errorText(err) });
    this.emit('redisError', err);
  }

  private async main(): Promise<void> {
    if (this.opts.handleSignals !== false) {
      let signals = 0;
      this.signalHandler = () => {
        signals++;
        if (signals === 1) {
          this.log.info('signal received: shutting down gracefully (send it again to stop now)');
          void this.close();
        } else {
          this.log.warn('signal received again: abandoning the jobs in flight');
          void this.close({ now: true });
        }
      };
      process.on('SIGTERM', this.signalHandler);
      process.on('SIGINT', this.signalHandler);
    }
    try {
      const settings = await this.queue.settings().catch(() => null);
      this.leaseMs = this.opts.visibilityMs ?? settings?.visibilityTimeoutMs ?? 30_000;
      if (this.opts.durability !== undefined) this.queue.durability = parseDurability(this.opts.durability);
      else if (!this.queue.durability && settings?.durability) {
        this.queue.durability = parseDurability(settings.durability);
        this.log.info("using the queue's durability setting", { durability: settings.durability });
      }
      let quietUntil = 0;
      this.queue.onUnconfirmed = (e) => {
        this.counters.unconfirmed++;
        if (now() < quietUntil) return;
        quietUntil = now() + 10_000;
        this.log.warn(`${e.what} applied on the primary but not confirmed by ${e.wanted} replica(s) (only ${e.confirmed} within ${e.timeoutMs}ms): a failover now may undo it; calls not confirmed in the next 10s are not logged`);
      };
      this.log.info('worker started', { queue: this.queue.name, worker: this.workerId, concurrency: this.concurrency, leaseMs: this.leaseMs });
      const renewer = this.renewLoop();
      const reaper = this.opts.reaper === false ? Promise.resolve() : this.reapLoop();
      await this.claimLoop();
      await this.shutdown();
      await Promise.all([renewer, reaper]);
    } finally {
      this.blocker?.disconnect();
      if (this.signalHandler) {
        process.off('SIGTERM', this.signalHandler);
        process.off('SIGINT', this.signalHandler);
      }
      this.log.info('worker stopped', { queue: this.queue.name, ...this.counters });
      this.emit('stopped', this.counters);
    }
  }

  // ---- the claim loop -------------------------------------------------------------

  private async claimLoop() {
    const backoff = new Backoff();
    while (!this.stopping) {
      const endings = this.endings.splice(0, MAX_BATCH);
      const free = this.concurrency - this.held;
      const n = Math.min(this.maxClaim, free + endings.length);
      if (n <= 0) {
        await this.waitKick();
        continue;
      }
      const leaseMs = this.leaseMs;
      const sent = now();
      const reply = await this.settleAndClaim(endings, n, leaseMs, backoff);
      if (reply === 'failed') {
        await Promise.race([sleep(backoff.delay()), this.waitKick()]);
        continue;
      }
      backoff.reset();
      const { leases, more, firstSent } = reply;
      if (leases.length > 0) {
        this.counters.claimed += leases.length;
        const deadline = Math.min(sent, firstSent) + leaseMs;
        for (const lease of leases) this.start(lease, deadline);
        continue;
      }
      if (more) continue;
      if (this.endings.length > 0 || this.stopping) continue;
      // Idle: wait for a wake marker, up to the poll interval or the earliest due time.
      // Jobs finishing meanwhile are ended by calls of their own.
      this.endingsOpen = false;
      try {
        await this.idleWait();
      } finally {
        this.endingsOpen = true;
      }
    }
  }

  private async idleWait() {
    const poll = this.opts.pollIntervalMs ?? 1000;
    let wait = poll;
    try {
      const due = await this.queue.nextDueIn();
      if (due !== null) wait = Math.min(poll, Math.max(5, due + 1));
    } catch (err) {
      this.redisError('reading the earliest delayed job', err);
    }
    if (this.stopping) return;
    if (!this.blocker) {
      this.blocker = (this.queue.client as Redis).duplicate();
      this.blocker.on('error', () => {});
    }
    const blocker = this.blocker;
    try {
      await blocker.blpop(this.queue.keys.wake, Math.max(0.01, wait / 1000));
    } catch (err) {
      // Disconnected by shutdown, or Redis unreachable: a fresh connection next time.
      if (this.blocker === blocker) this.blocker = null;
      blocker.disconnect();
      if (!this.stopping) {
        this.redisError('waiting for jobs', err);
        await sleep(Math.min(poll, 200));
      }
    }
  }

  /**
   * One settle_claim: the endings' acks and fails, and a claim of up to n jobs. A call
   * whose failure is transient (its reply may be lost) is sent again unchanged, same
   * request id, so Redis answers it from its record: the endings are settled once and
   * the leases it made reach this worker. Past the retry window, as a new request (each
   * ending still applied at most once, by its token; leases of the lost call expire to
   * the reaper). A claim with nothing to settle is not resent once shutdown began.
   */
  private async settleAndClaim(endings: Ending[], n: number, leaseMs: number, backoff: Backoff): Promise<{ leases: LeaseReply[]; more: boolean; firstSent: number } | 'failed'> {
    const acks = endings.filter((e) => e.kind === 'ack');
    const fails = endings.filter((e): e is Extract<Ending, { kind: 'fail' }> => e.kind === 'fail');
    let request = newToken();
    let firstSent = now();
    let reply;
    for (;;) {
      try {
        reply = await this.queue.settleClaim({
          request,
          n,
          worker: this.workerId,
          visibilityMs: leaseMs,
          acks: acks.map((e) => e.f.lease),
          fails: fails.map((e) => ({ lease: e.f.lease, error: e.error, mode: e.mode })),
        });
        break;
      } catch (err) {
        if (endings.length === 0 && (this.stopping || !isTransient(err))) {
          this.redisError('claim', err);
          return 'failed';
        }
        if (!isTransient(err) || this.hardStop) {
          this.redisError('ending leases (giving up: the leases will expire)', err);
          for (const e of endings) this.endLease(e.f);
          return 'failed';
        }
        this.redisError('ending leases and claiming; retrying', err);
        await sleep(backoff.delay());
        if (now() - firstSent > RETRY_WINDOW_MS) {
          request = newToken();
          firstSent = now();
        }
      }
    }
    acks.forEach((e, i) => this.noteAck(e.f, reply.acked[i]));
    fails.forEach((e, i) => this.noteFail(e.f, e.error, reply.failed[i]));
    for (const e of endings) this.endLease(e.f);
    return { leases: reply.leases, more: reply.more, firstSent };
  }

  // ---- one job --------------------------------------------------------------------

  private start(lease: LeaseReply, deadline: number) {
    this.held++;
    const f: InFlight = {
      lease,
      key: lease.id.toString('hex') + ':' + lease.token.toString('hex'),
      ac: new AbortController(),
      deadline,
      completing: false,
      cancelled: false,
      timedOut: false,
      shutdownStopped: false,
      freed: false,
    };
    if (now() >= deadline) {
      // The reply came after the lease's local deadline: running it could overlap
      // another worker's run. Released at once, uncharged.
      this.counters.lost++;
      this.log.warn("the claim's reply came after the lease's local deadline; releasing the job", { job: lease.id.toString() });
      this.direct(this.queue.release(lease).then((o) => this.noteRelease(o)), f);
      return;
    }
    this.inflight.set(f.key, f);
    this.armDeadline(f);
    let timeout: NodeJS.Timeout | undefined;
    if (this.opts.timeoutMs !== undefined) {
      timeout = setTimeout(() => {
        f.timedOut = true;
        this.stop(f, 'timeout');
      }, this.opts.timeoutMs);
    }
    const job: Job = {
      id: lease.id.toString(),
      idBytes: lease.id,
      payload: lease.payload,
      attempts: lease.attempts,
      signal: f.ac.signal,
      queue: this.queue.name,
      workerId: this.workerId,
    };
    let result: Promise<unknown>;
    try {
      result = Promise.resolve(this.handler(job, f.ac.signal));
    } catch (err) {
      result = Promise.reject(err);
    }
    result.then(
      () => this.finished(f, null, timeout),
      (err) => this.finished(f, err ?? new Error('rejected'), timeout),
    );
  }

  private armDeadline(f: InFlight) {
    if (f.timer) clearTimeout(f.timer);
    f.timer = setTimeout(() => {
      if (f.completing || f.lostAt !== undefined) return;
      this.log.warn("the lease's local deadline passed without a renewal: the lease may be gone; stopping the job", { job: f.lease.id.toString() });
      this.lose(f, 'deadline');
    }, Math.max(0, f.deadline - now()));
  }

  /** Fire the job's signal; after the grace, take its slot back if it still runs. */
  private stop(f: InFlight, why: LeaseLost['why']) {
    if (f.lostAt !== undefined) return;
    f.lostAt = now();
    f.ac.abort(new LeaseLost(why));
    const grace = this.opts.leaseGraceMs ?? 5000;
    f.graceTimer = setTimeout(() => {
      if (f.freed || f.completing) return;
      this.log.warn('the job still ran after it was stopped and the grace period passed; giving its slot back', { job: f.lease.id.toString() });
      if (why === 'timeout') {
        // Its lease is still this worker's: fail it as the timeout says.
        f.completing = true;
        this.endDirect(f, { f, kind: 'fail', error: `timed out after ${this.opts.timeoutMs} ms`, mode: 'retry' });
        return;
      }
      if (why === 'cancelled') {
        f.completing = true;
        this.direct(this.queue.endCancelled(f.lease).then((ok) => this.noteCancelled(f, ok)), f);
        return;
      }
      this.endLease(f);
    }, grace);
  }

  private lose(f: InFlight, why: 'deadline' | 'stale') {
    this.counters.lost++;
    this.stop(f, why);
  }

  private async finished(f: InFlight, err: unknown, timeout?: NodeJS.Timeout) {
    if (timeout) clearTimeout(timeout);
    if (f.freed || f.completing) return;
    // A renewal in flight decides first whether the lease is still held.
    while (this.renewing) await this.renewing;
    if (f.freed || f.completing) return;
    if (f.timer) clearTimeout(f.timer);
    if (f.graceTimer) clearTimeout(f.graceTimer);
    const lost = (f.lostAt !== undefined && !f.cancelled && !f.timedOut && !f.shutdownStopped) || now() >= f.deadline;
    if (lost) {
      if (f.lostAt === undefined) this.counters.lost++;
      this.log.warn('lease was lost while the job ran; its result is not acked', { job: f.lease.id.toString(), attempt: f.lease.attempts });
      this.endLease(f);
      return;
    }
    f.completing = true;
    if (f.cancelled) {
      this.direct(this.queue.endCancelled(f.lease).then((ok) => this.noteCancelled(f, ok)), f);
      return;
    }
    if (err !== null && f.shutdownStopped) {
      this.direct(this.queue.release(f.lease).then((o) => this.noteRelease(o)), f);
      return;
    }
    let ending: Ending;
    if (f.timedOut) ending = { f, kind: 'fail', error: `timed out after ${this.opts.timeoutMs} ms`, mode: 'retry' };
    else if (err === null) ending = { f, kind: 'ack' };
    else ending = { f, kind: 'fail', error: errorText(err), mode: err instanceof DeadLetter ? 'dead' : 'retry' };
    if (this.endingsOpen && !this.stopping) {
      this.endings.push(ending);
      this.kick();
    } else {
      this.endDirect(f, ending);
    }
  }

  /** End a lease with a call of its own (the claim loop is waiting or stopped). */
  private endDirect(f: InFlight, e: Ending) {
    if (e.kind === 'ack') this.direct(this.withRetry('ack', () => this.queue.ack([f.lease])).then((r) => r && this.noteAck(f, r[0])), f);
    else this.direct(this.withRetry('fail', () => this.queue.fail(f.lease, e.error, e.mode)).then((r) => r && this.noteFail(f, e.error, r)), f);
  }

  private direct(p: Promise<unknown>, f: InFlight) {
    const tracked = p
      .catch((err) => this.redisError('ending a lease', err))
      .finally(() => {
        this.endLease(f);
        this.directs.delete(tracked);
      });
    this.directs.add(tracked);
  }

  private async withRetry<T>(what: string, op: () => Promise<T>): Promise<T | null> {
    const backoff = new Backoff();
    for (;;) {
      try {
        return await op();
      } catch (err) {
        if (!isTransient(err) || this.hardStop) {
          this.redisError(`${what} (giving up: the lease will expire)`, err);
          return null;
        }
        this.redisError(`${what}; retrying`, err);
        await sleep(backoff.delay());
      }
    }
  }

  /** The lease is over for this worker: its slot is free. */
  private endLease(f: InFlight) {
    if (f.freed) return;
    f.freed = true;
    if (f.timer) clearTimeout(f.timer);
    if (f.graceTimer) clearTimeout(f.graceTimer);
    this.inflight.delete(f.key);
    this.held--;
    this.kick();
    if (this.inflight.size === 0 && this.idleResolve) this.idleResolve();
  }

  private noteAck(f: InFlight, ok: boolean) {
    if (ok) {
      this.counters.acked++;
      this.emit('completed', f.lease.id.toString());
    } else {
      this.counters.stale++;
      this.log.warn('ack refused as stale: the lease had been taken away', { job: f.lease.id.toString() });
    }
  }

  private noteFail(f: InFlight, error: string, outcome: FailOutcome) {
    if (outcome === 'dead') this.counters.dead++;
    else if (outcome === 'stale') this.counters.stale++;
    else this.counters.retried++;
    this.emit('failed', f.lease.id.toString(), error, outcome);
  }

  private noteRelease(outcome: FailOutcome) {
    if (outcome === 'stale') this.counters.stale++;
    else this.counters.released++;
  }

  private noteCancelled(f: InFlight, ok: boolean) {
    if (ok) this.counters.cancelled++;
    else this.counters.stale++;
  }

  // ---- renewals, reaper, shutdown -------------------------------------------------

  /** Ends the renewer's and the reaper's waits at the end of shutdown. */
  private readonly background = new AbortController();

  /** Wait `ms`; false once the background tasks are stopped. */
  private async nap(ms: number): Promise<boolean> {
    if (this.background.signal.aborted) return false;
    try {
      await sleepFor(ms, undefined, { signal: this.background.signal });
      return true;
    } catch {
      return false;
    }
  }

  private async renewLoop() {
    const backoff = new Backoff();
    let wait = this.leaseMs / 3;
    while (await this.nap(wait)) {
      if (this.opts.visibilityMs === undefined) {
        try {
          this.leaseMs = (await this.queue.settings()).visibilityTimeoutMs;
        } catch {
          /* keep the last value */
        }
      }
      const interval = Math.max(10, this.leaseMs / 3);
      const leaseMs = this.leaseMs;
      const sent = now();
      const held = [...this.inflight.values()].filter((f) => !f.completing && f.lostAt === undefined && sent < f.deadline);
      if (held.length === 0) {
        wait = interval;
        continue;
      }
      const budget = Math.min(...held.map((f) => f.deadline)) - sent;
      let done!: () => void;
      this.renewing = new Promise((r) => (done = r));
      try {
        const results = await Promise.race([
          this.queue.extend(held.map((f) => f.lease), leaseMs),
          sleep(budget).then(() => {
            throw new Error('no reply before the earliest lease deadline');
          }),
        ]);
        backoff.reset();
        this.counters.renewals++;
        wait = interval;
        held.forEach((f, i) => {
          const r = results[i];
          if (f.freed) return;
          if (r.kind !== 'stale') {
            f.deadline = Math.max(f.deadline, sent + leaseMs);
            if (f.lostAt === undefined) this.armDeadline(f);
          }
          if (r.kind === 'cancelled' && !f.completing && f.lostAt === undefined) {
            f.cancelled = true;
            this.log.info("the job's cancellation was asked for; stopping it", { job: f.lease.id.toString() });
            this.stop(f, 'cancelled');
          } else if (r.kind === 'stale' && !f.completing && f.lostAt === undefined) {
            this.log.warn('lease renewal came back stale: the lease was taken away; stopping the job', { job: f.lease.id.toString() });
            this.lose(f, 'stale');
          }
        });
      } catch (err) {
        wait = Math.min(backoff.delay(), interval);
        this.redisError('lease renewal', err);
      } finally {
        this.renewing = null;
        done();
      }
    }
  }

  private reapInterval(): number {
    const base = Math.min(Math.max(this.leaseMs / 2, 100), 60_000);
    return base * (0.75 + Math.random() * 0.5);
  }

  private async reapLoop() {
    // The first pass at a random point of the first interval.
    let wait = this.reapInterval() * Math.random();
    while (!this.stopping && (await this.nap(wait))) {
      wait = this.reapInterval();
      try {
        for (let i = 0; i < REAP_CALLS; i++) {
          const r = await this.queue.reap(REAP_BATCH);
          const reaped = r.requeued + r.deadLettered;
          this.counters.reaped += reaped;
          if (reaped > 0) this.log.info('reaped expired leases of workers that stopped renewing them', { requeued: r.requeued, deadLettered: r.deadLettered });
          if (!r.more) break;
        }
      } catch (err) {
        this.redisError('reap', err);
      }
      if (this.stopping) return;
    }
  }

  private async shutdown() {
    this.endingsOpen = false;
    // Jobs handed to the claim loop and not ended yet: end them now.
    for (const e of this.endings.splice(0)) this.endDirect(e.f, e);
    const deadline = this.opts.shutdownTimeoutMs ?? 30_000;
    this.log.info('shutting down: no more claims, waiting for jobs in flight', { running: this.inflight.size, deadlineMs: deadline });
    const allDone = () =>
      this.inflight.size === 0
        ? Promise.resolve()
        : new Promise<void>((r) => (this.idleResolve = r));
    let timer: NodeJS.Timeout | undefined;
    const finished = await Promise.race([
      allDone().then(() => true),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(false), deadline))),
      this.hardStopped.then(() => false),
    ]);
    clearTimeout(timer);
    if (!finished) {
      this.hardStop = true;
      for (const f of this.inflight.values()) {
        this.log.warn('shutdown deadline passed: job stopped; released if it stops in time, else its lease will expire', { job: f.lease.id.toString() });
        if (f.lostAt === undefined && !f.completing) {
          f.lostAt = now();
          f.shutdownStopped = true;
          f.ac.abort(new LeaseLost('shutdown'));
        }
      }
      // Jobs that stop in time are released (uncharged); the rest are abandoned.
      await Promise.race([allDone(), sleep(ABORT_GRACE_MS)]);
      this.hardStop = true;
    }
    await Promise.all([...this.directs]);
    this.background.abort();
  }
}
