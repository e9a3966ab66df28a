// A queue: the producer's API (enqueue, stats, settings) and the protocol's calls the
// worker makes (claim, settle_claim, ack, extend, fail, reap, manage), each one script
// call whose reply is read by its function in replies.ts.
import { randomBytes } from 'node:crypto';
import { connect, type ConnectOptions } from './connect';
import { QueueKeys, type JobId } from './keys';
import * as replies from './replies';
import { callScript, callScriptAndWait, type Arg, type Client, type Reply, type ScriptName } from './scripts';

/** The most jobs, acks or fails one script call takes (docs/protocol.md, Clock and numbers). */
export const MAX_BATCH = 1000;
/** Payloads over this are refused before sending, as the Rust client does by default. */
export const DEFAULT_MAX_PAYLOAD = 64 * 1024 * 1024;
const MAX_ID_LEN = 1024;
const MAX_MS = 1e15;

export interface QueueOptions {
  /** The queue's hash tag `T` (keys `P:{T}:…`). */
  tag: string;
  /** The key prefix `P` (default `jq`). */
  prefix?: string;
  /** Largest payload enqueue sends, in bytes (default 64 MiB). */
  maxPayload?: number;
  /**
   * `primary` (default) or `replicated[:N[:TIMEOUT]]` (e.g. `replicated:1:500ms`): every
   * write is followed by `WAIT N TIMEOUT` in the same round trip (docs/operations.md,
   * Durability).
   */
  durability?: string;
}

export interface Durability {
  replicas: number;
  timeoutMs: number;
}

/** A write that ran on the primary and that fewer replicas than asked confirmed in time. */
export class NotReplicated extends Error {
  constructor(readonly what: string, readonly confirmed: number, readonly wanted: number, readonly timeoutMs: number) {
    super(`jobqueue: ${what} ran on the primary but only ${confirmed} of ${wanted} replica(s) confirmed it within ${timeoutMs}ms: it may be lost if the primary fails now, and sending it again may run it twice`);
    this.name = 'NotReplicated';
  }
}

/** `primary`, `replicated`, `replicated:N`, `replicated:N:TIMEOUT` (ms or s): null for primary. */
export function parseDurability(text: string): Durability | null {
  const t = text.trim();
  if (t === 'primary') return null;
  const m = /^replicated(?::(\d+)(?::(\d+)(ms|s)?)?)?$/.exec(t);
  if (!m) throw new Error(`jobqueue: invalid durability: ${JSON.stringify(text)}: write primary, replicated, replicated:N or replicated:N:TIMEOUT (e.g. replicated:1:500ms)`);
  const replicas = m[1] === undefined ? 1 : Number(m[1]);
  const timeoutMs = m[2] === undefined ? 1000 : Number(m[2]) * (m[3] === 's' ? 1000 : 1);
  if (replicas < 1 || timeoutMs < 1) throw new Error(`jobqueue: invalid durability: ${JSON.stringify(text)}: at least 1 replica and 1 ms`);
  return { replicas, timeoutMs };
}

/** A job's own retry policy (docs/protocol.md, Per-job options). */
export interface JobOptions {
  maxAttempts?: number;
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** A plain decimal, 1 to 1000 (a number or its text, e.g. `1.5`). */
  backoffMultiplier?: number | string;
}

/** A unique key (docs/protocol.md, Unique keys): at most one job of the queue holds it. */
export interface UniqueKey {
  /** 1 to 1024 bytes. */
  key: JobId;
  /** `until-started` (default), `until-done` or `debounce`. */
  mode?: 'until-started' | 'until-done' | 'debounce';
  /** The lock's window in ms (0 or absent: none). */
  forMs?: number;
}

export interface EnqueueOptions extends JobOptions {
  unique?: UniqueKey;
  /** The job's id (1 to 1024 bytes); generated (12 base62 characters) when absent. */
  id?: JobId;
  /** Run after this many ms (Redis's clock). */
  delayMs?: number;
  /** Run at this time (ms since the epoch, or a Date), on Redis's clock. */
  at?: number | Date;
}

export interface NewJob extends EnqueueOptions {
  payload: string | Buffer | Uint8Array;
}

export interface Enqueued {
  id: JobId;
  /** false: a job with this id was already there, or its unique key is held. */
  added: boolean;
  /** With a unique key: `refused` (held by `holder`) or `replaced` (debounce: `holder` took this job). */
  unique?: { outcome: 'refused' | 'replaced'; holder: Buffer };
}

export interface QueueSettings {
  visibilityTimeoutMs: number;
  maxAttempts: number;
  backoffInitialMs: number;
  backoffMultiplier: number;
  backoffMaxMs: number;
  paused: boolean;
  /** The durability the operator publishes for workers (`replicated:1:1000ms`), if any. */
  durability?: string;
}

export type FailMode = 'retry' | 'dead' | 'release';

/** A lease as the calls that end or renew it need it: the job's id and the lease's token. */
export interface LeaseRef {
  id: Buffer;
  token: Buffer;
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** 12 characters of base62 (about 71 random bits), as the Rust client makes them. */
export function generateId(): string {
  let out = '';
  while (out.length < 12) {
    for (const b of randomBytes(16)) {
      if (b < 248 && out.length < 12) out += BASE62[b % 62];
    }
  }
  return out;
}

/** 128 random bits in hex: a request id or a claim slot token. */
export function newToken(): string {
  return randomBytes(16).toString('hex');
}

function byteLength(v: JobId): number {
  return typeof v === 'string' ? Buffer.byteLength(v) : v.length;
}

function wholeMs(what: string, v: number, least = 0): string {
  if (!Number.isSafeInteger(v) || v < least || v > MAX_MS) {
    throw new Error(`jobqueue: invalid ${what}: expected a whole number of ms from ${least} to 10^15, got ${v}`);
  }
  return String(v);
}

function delayArg(job: EnqueueOptions, i: number): string {
  if (job.at !== undefined) {
    if (job.delayMs !== undefined) throw new Error(`jobqueue: invalid job ${i}: give delayMs or at, not both`);
    const t = job.at instanceof Date ? job.at.getTime() : job.at;
    return '@' + wholeMs('at', t);
  }
  return wholeMs('delayMs', job.delayMs ?? 0);
}

/** The `options` block of enqueue: name, value pairs, in a fixed order. */
function optionPairs(o: JobOptions): string[] {
  const out: string[] = [];
  if (o.maxAttempts !== undefined) out.push('max_attempts', String(o.maxAttempts));
  if (o.backoffInitialMs !== undefined) out.push('backoff_initial_ms', String(o.backoffInitialMs));
  if (o.backoffMaxMs !== undefined) out.push('backoff_max_ms', String(o.backoffMaxMs));
  if (o.backoffMultiplier !== undefined) out.push('backoff_multiplier', String(o.backoffMultiplier));
  return out;
}

function setting(meta: Record<string, string>, name: string, def: number, least = 0): number {
  const raw = meta[name];
  if (raw === undefined || !/^-?\d+(\.\d+)?$/.test(raw.trim())) return def;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0) return def;
  return Math.min(Math.max(v, least), MAX_MS);
}

export class Queue {
  readonly keys: QueueKeys;
  readonly maxPayload: number;
  /** Writes wait for this many replicas (null: the primary alone). */
  durability: Durability | null;
  /** Told of each write that too few replicas confirmed (the worker counts and logs them). */
  onUnconfirmed?: (e: NotReplicated) => void;
  private owned = false;

  constructor(readonly client: Client, opts: QueueOptions | string) {
    const o = typeof opts === 'string' ? { tag: opts } : opts;
    this.keys = new QueueKeys(o.tag, o.prefix ?? 'jq');
    this.maxPayload = o.maxPayload ?? DEFAULT_MAX_PAYLOAD;
    this.durability = o.durability ? parseDurability(o.durability) : null;
  }

  /** A queue on a connection of its own, closed by `close()`. */
  static connect(queue: QueueOptions | string, conn: ConnectOptions = {}): Queue {
    const q = new Queue(connect(conn), queue);
    // Each call's failure reaches its caller; the connection's own events are not printed.
    q.client.on('error', () => {});
    q.owned = true;
    return q;
  }

  get name(): string {
    return this.keys.tag;
  }

  /** Closes the connection when the queue made it (`Queue.connect`). */
  async close(): Promise<void> {
    if (this.owned) await this.client.quit().catch(() => this.client.disconnect());
  }

  /**
   * The low-level call: script `name` with KEYS = the seven queue keys then `extraKeys`,
   * ARGV = the job-key prefix then `args` (docs/protocol.md, Scripts at a glance).
   */
  call(name: ScriptName, extraKeys: readonly (string | Buffer)[], args: readonly Arg[]): Promise<Reply> {
    return callScript(this.client, name, [...this.keys.queue, ...extraKeys], [this.keys.jobPrefix, ...args]);
  }

  /**
   * A write: `call`, followed by WAIT under `replicated` durability. Too few confirmations
   * go to `onUnconfirmed` when it is set (the reply is still returned: the call ran),
   * else throw NotReplicated.
   */
  private async write(what: string, name: ScriptName, extraKeys: readonly (string | Buffer)[], args: readonly Arg[]): Promise<Reply> {
    const d = this.durability;
    if (!d) return this.call(name, extraKeys, args);
    const { reply, confirmed } = await callScriptAndWait(this.client, name, [...this.keys.queue, ...extraKeys], [this.keys.jobPrefix, ...args], d.replicas, d.timeoutMs);
    if (confirmed < d.replicas) {
      const e = new NotReplicated(what, confirmed, d.replicas, d.timeoutMs);
      if (!this.onUnconfirmed || name === 'enqueue') throw e;
      this.onUnconfirmed(e);
    }
    return reply;
  }

  /** Enqueue one job; returns its id and whether it was added. */
  async enqueue(payload: string | Buffer | Uint8Array, opts: EnqueueOptions = {}): Promise<Enqueued> {
    return (await this.enqueueMany([{ ...opts, payload }]))[0];
  }

  /**
   * Enqueue jobs in as few calls as their options allow: runs of jobs with the same
   * per-job options share a call of up to 1000 jobs. Answers one entry per job, in order.
   * A generated id found taken is replaced and its job sent again (never a lost job nor
   * a false duplicate); an id the caller gave is never replaced.
   */
  async enqueueMany(jobs: readonly NewJob[]): Promise<Enqueued[]> {
    const prepared = jobs.map((job, i) => {
      const payload = typeof job.payload === 'string' ? Buffer.from(job.payload) : Buffer.from(job.payload.buffer, job.payload.byteOffset, job.payload.byteLength);
      if (payload.length > this.maxPayload) {
        throw new Error(`jobqueue: invalid payload: job ${i} holds ${payload.length} bytes, over the limit of ${this.maxPayload}`);
      }
      if (job.id !== undefined && (byteLength(job.id) < 1 || byteLength(job.id) > MAX_ID_LEN)) {
        throw new Error(`jobqueue: invalid id: job ${i}: expected an id of 1..${MAX_ID_LEN} bytes, got ${byteLength(job.id)} bytes`);
      }
      const opts = optionPairs(job);
      const u = job.unique;
      if (u && (byteLength(u.key) < 1 || byteLength(u.key) > MAX_ID_LEN)) {
        throw new Error(`jobqueue: invalid unique_key: job ${i}: expected a key of 1..${MAX_ID_LEN} bytes, got ${byteLength(u.key)} bytes`);
      }
      const uniqueHead = u ? ['unique', u.mode ?? 'until-started', wholeMs('unique forMs', u.forMs ?? 0)] : [];
      const group = [...uniqueHead, '', ...opts].join('\0');
      return { id: job.id ?? generateId(), generated: job.id === undefined, payload, delay: delayArg(job, i), opts, uniqueHead, uniqueKey: u?.key, group };
    });
    const out: Enqueued[] = new Array(prepared.length);
    let start = 0;
    while (start < prepared.length) {
      let end = start + 1;
      while (end < prepared.length && end - start < MAX_BATCH && prepared[end].group === prepared[start].group) end++;
      let run = prepared.slice(start, end).map((p, k) => ({ ...p, at: start + k }));
      for (let attempt = 0; run.length > 0; attempt++) {
        const args: Arg[] = [String(run.length)];
        for (const p of run) args.push(p.id, p.payload, p.delay);
        if (run[0].uniqueHead.length > 0) args.push(...run[0].uniqueHead, ...run.map((p) => p.uniqueKey!));
        if (run[0].opts.length > 0) args.push('options', ...run[0].opts);
        const outcomes = replies.parseEnqueue(await this.write(`an enqueue of ${run.length} job(s)`, 'enqueue', run.map((p) => this.keys.job(p.id)), args));
        const again: typeof run = [];
        run.forEach((p, k) => {
          const o = outcomes[k];
          if (o.kind === 'exists' && p.generated && attempt < 5) again.push({ ...p, id: generateId() });
          else if (o.kind === 'refused' || o.kind === 'replaced') out[p.at] = { id: p.id, added: false, unique: { outcome: o.kind, holder: o.holder } };
          else out[p.at] = { id: p.id, added: o.kind === 'added' };
        });
        run = again;
      }
      start = end;
    }
    return out;
  }

  /** The queue's counts and counters (docs/protocol.md, stats). */
  async stats(): Promise<Record<string, number>> {
    return replies.parseStats(await this.call('stats', [this.keys.orphans], []));
  }

  /** The settings the scripts read from meta, defaults where absent or unreadable. */
  async settings(): Promise<QueueSettings> {
    const meta = await this.client.hgetall(this.keys.meta);
    return {
      visibilityTimeoutMs: setting(meta, 'visibility_timeout_ms', 30000, 1) || 30000,
      maxAttempts: Math.max(1, setting(meta, 'max_attempts', 5)),
      backoffInitialMs: setting(meta, 'backoff_initial_ms', 1000),
      backoffMultiplier: setting(meta, 'backoff_multiplier', 2),
      backoffMaxMs: setting(meta, 'backoff_max_ms', 300000),
      paused: meta.paused !== undefined,
      durability: meta.durability,
    };
  }

  /** Write queue settings into meta (the fields of docs/protocol.md, Settings). */
  async configure(fields: Record<string, string | number>): Promise<void> {
    await this.client.hset(this.keys.meta, fields);
  }

  /** claim: up to n jobs, leased to `worker` for `visibilityMs` (0: the queue's). */
  async claim(n: number, worker: string, visibilityMs = 0, request = newToken()): Promise<replies.ClaimReply> {
    const tokens = Array.from({ length: n }, () => newToken());
    const r = await this.write(`a claim of up to ${n} job(s)`, 'claim', [this.keys.orphans, this.keys.claimreq(request)], [String(n), worker, String(visibilityMs), request, ...tokens]);
    return replies.parseClaim(r);
  }

  /** settle_claim: end these leases (acks, then fails) and claim up to n jobs, in one call. */
  async settleClaim(p: {
    request: string;
    n: number;
    worker: string;
    visibilityMs: number;
    acks: readonly LeaseRef[];
    fails: readonly { lease: LeaseRef; error: string; mode: FailMode; backoffMs?: number }[];
  }): Promise<replies.SettleClaimReply> {
    const args: Arg[] = [String(p.n), p.worker, String(p.visibilityMs), p.request, String(p.acks.length), String(p.fails.length)];
    for (const a of p.acks) args.push(a.id, a.token);
    for (const f of p.fails) args.push(f.lease.id, f.lease.token, f.error, f.mode, String(f.backoffMs ?? -1));
    const what = `the end of ${p.acks.length + p.fails.length} lease(s) and a claim of up to ${p.n} job(s)`;
    const r = await this.write(what, 'settle_claim', [this.keys.orphans, this.keys.claimreq(p.request)], args);
    return replies.parseSettleClaim(r, p.acks.length, p.fails.length);
  }

  async ack(leases: readonly LeaseRef[]): Promise<boolean[]> {
    const out: boolean[] = [];
    for (let i = 0; i < leases.length; i += MAX_BATCH) {
      const chunk = leases.slice(i, i + MAX_BATCH);
      const args: Arg[] = [String(chunk.length)];
      for (const l of chunk) args.push(l.id, l.token);
      out.push(...replies.parseAck(await this.write(`${chunk.length} ack(s)`, 'ack', chunk.map((l) => this.keys.job(l.id)), args)));
    }
    return out;
  }

  /** extend: renew these leases for `ms` (0: the queue's visibility timeout). */
  async extend(leases: readonly LeaseRef[], ms: number): Promise<replies.Renewal[]> {
    const out: replies.Renewal[] = [];
    for (let i = 0; i < leases.length; i += MAX_BATCH) {
      const chunk = leases.slice(i, i + MAX_BATCH);
      const args: Arg[] = [String(ms), String(chunk.length)];
      for (const l of chunk) args.push(l.id, l.token);
      out.push(...replies.parseExtend(await this.call('extend', chunk.map((l) => this.keys.job(l.id)), args)));
    }
    return out;
  }

  /** fail: retry (backoff -1: the policy's), dead-letter, or release the job. */
  async fail(lease: LeaseRef, error: string, mode: FailMode = 'retry', backoffMs = -1): Promise<replies.FailOutcome> {
    const r = await this.write(mode === 'release' ? 'a release' : 'a fail', 'fail', [this.keys.job(lease.id)], [lease.id, lease.token, error, mode, String(backoffMs)]);
    return replies.parseFail(r);
  }

  /** Give back an unfinished job, uncharged: first in line again. */
  release(lease: LeaseRef): Promise<replies.FailOutcome> {
    return this.fail(lease, '', 'release', 0);
  }

  /** End the lease of a job whose cancellation was asked for (manage `cancelled`). */
  async endCancelled(lease: LeaseRef): Promise<boolean> {
    const r = await this.call('manage', [this.keys.job(lease.id)], ['cancelled', lease.id, lease.token]);
    return replies.parseManage(r) === 1;
  }

  /** Ask for a job's cancellation (manage `cancel`); answers the status it had. */
  async cancel(id: JobId): Promise<string> {
    return String(replies.parseManage(await this.call('manage', [this.keys.job(id)], ['cancel', id])));
  }

  /** One reap call: expired leases back in line (or dead), due delayed jobs promoted. */
  async reap(batch = 100): Promise<replies.ReapReply> {
    return replies.parseReap(await this.write('a reap', 'reap', [this.keys.orphans], [String(batch)]));
  }

  /** The ms until the earliest delayed job is due on Redis's clock (null: none). */
  async nextDueIn(): Promise<number | null> {
    const [[e1, first], [e2, time]] = (await this.client.pipeline().zrange(this.keys.delayed, 0, 0, 'WITHSCORES').time().exec()) as [
      [Error | null, string[]],
      [Error | null, [string, string]],
    ];
    if (e1) throw e1;
    if (e2) throw e2;
    if (!first || first.length < 2) return null;
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
    return Math.max(0, Number(first[1]) - now);
  }
}
