// Each script's reply is read here, in one function per script (docs/protocol.md,
// Scripts at a glance): a script that gains reply fields changes one function.
import type { Reply } from './scripts';

/** One lease a claim or settle_claim made. */
export interface LeaseReply {
  id: Buffer;
  payload: Buffer;
  attempts: number;
  token: Buffer;
  leaseUntil: number;
}

export interface ClaimReply {
  leases: LeaseReply[];
  more: boolean;
}

export type FailOutcome = 'pending' | 'delayed' | 'dead' | 'stale';

export interface SettleClaimReply extends ClaimReply {
  /** One per ack, in order: true acked, false stale. */
  acked: boolean[];
  /** One per fail, in order. */
  failed: FailOutcome[];
}

export interface ReapReply {
  requeued: number;
  deadLettered: number;
  more: boolean;
  promoted: number;
  restored: number;
}

function arr(r: Reply, what: string): Reply[] {
  if (!Array.isArray(r)) throw new Error(`jobqueue: unexpected ${what} reply: expected an array`);
  return r;
}
function num(r: Reply | undefined): number {
  if (typeof r === 'number') return r;
  if (Buffer.isBuffer(r)) return Number(r.toString());
  throw new Error('jobqueue: unexpected reply: expected an integer');
}
function buf(r: Reply | undefined): Buffer {
  if (Buffer.isBuffer(r)) return r;
  if (typeof r === 'number') return Buffer.from(String(r));
  throw new Error('jobqueue: unexpected reply: expected a string');
}

/** What enqueue did with one job. */
export type EnqueueOutcome =
  | { kind: 'added' }
  | { kind: 'exists' }
  /** Its unique key is held by the job `holder`: nothing written. */
  | { kind: 'refused'; holder: Buffer }
  /** debounce: the waiting holder took this job's payload and delay. */
  | { kind: 'replaced'; holder: Buffer };

/** enqueue: per job 1 enqueued, 0 already there, `{2, holder}` refused, `{3, holder}` replaced. */
export function parseEnqueue(r: Reply): EnqueueOutcome[] {
  return arr(r, 'enqueue').map((x): EnqueueOutcome => {
    if (Array.isArray(x)) {
      const [code, holder] = x;
      return { kind: num(code) === 3 ? 'replaced' : 'refused', holder: buf(holder) };
    }
    return num(x) === 1 ? { kind: 'added' } : { kind: 'exists' };
  });
}

/** claim: `{jobs, more}`, each job `{id, payload, attempts, token, lease_until}`. */
export function parseClaim(r: Reply): ClaimReply {
  const [jobs, more] = arr(r, 'claim');
  return {
    leases: arr(jobs, 'claim').map((j) => {
      const [id, payload, attempts, token, leaseUntil] = arr(j, 'claim');
      return { id: buf(id), payload: buf(payload), attempts: num(attempts), token: buf(token), leaseUntil: num(leaseUntil) };
    }),
    more: num(more) === 1,
  };
}

/**
 * settle_claim: flat `more, token, a ack results, f fail outcomes`, then `id, payload,
 * attempts, lease_until` per lease (every lease's token is `token`).
 */
export function parseSettleClaim(r: Reply, a: number, f: number): SettleClaimReply {
  const flat = arr(r, 'settle_claim');
  const token = buf(flat[1]);
  const leases: LeaseReply[] = [];
  for (let i = 2 + a + f; i + 3 < flat.length; i += 4) {
    leases.push({ id: buf(flat[i]), payload: buf(flat[i + 1]), attempts: num(flat[i + 2]), token, leaseUntil: num(flat[i + 3]) });
  }
  return {
    more: num(flat[0]) === 1,
    acked: flat.slice(2, 2 + a).map((x) => num(x) === 1),
    failed: flat.slice(2 + a, 2 + a + f).map((x) => buf(x).toString() as FailOutcome),
    leases,
  };
}

/** ack: one integer per pair, 1 acked, 0 stale. */
export function parseAck(r: Reply): boolean[] {
  return arr(r, 'ack').map((x) => num(x) === 1);
}

/** What an extend did to one lease. */
export type Renewal = { kind: 'renewed'; leaseUntil: number } | { kind: 'stale' } | { kind: 'cancelled' };

/** extend: per pair the new lease_until, 0 stale, -1 extended but cancellation asked for. */
export function parseExtend(r: Reply): Renewal[] {
  return arr(r, 'extend').map((x) => {
    const v = num(x);
    if (v > 0) return { kind: 'renewed', leaseUntil: v };
    return v === -1 ? { kind: 'cancelled' } : { kind: 'stale' };
  });
}

/** fail: the job's new status. */
export function parseFail(r: Reply): FailOutcome {
  return buf(r).toString() as FailOutcome;
}

/** reap: `{requeued, dead_lettered, more, promoted, restored}`. */
export function parseReap(r: Reply): ReapReply {
  const [requeued, dead, more, promoted, restored] = arr(r, 'reap');
  return {
    requeued: num(requeued),
    deadLettered: num(dead),
    more: num(more) === 1,
    promoted: promoted === undefined ? 0 : num(promoted),
    restored: restored === undefined ? 0 : num(restored),
  };
}

/** stats: flat `name, value, …`. */
export function parseStats(r: Reply): Record<string, number> {
  const flat = arr(r, 'stats');
  const out: Record<string, number> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[buf(flat[i]).toString()] = num(flat[i + 1]);
  return out;
}

/** manage: an integer (pause, resume, run, cancelled) or a status (delete, cancel). */
export function parseManage(r: Reply): number | string {
  return typeof r === 'number' ? r : buf(r).toString();
}
