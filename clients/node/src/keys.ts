// The keys of one queue (docs/protocol.md, Keys): every key starts with `P:{T}:`, so all
// of a queue's keys hash to one Cluster slot.
export type JobId = string | Buffer;

export class QueueKeys {
  readonly base: string;
  readonly pending: string;
  readonly processing: string;
  readonly delayed: string;
  readonly dead: string;
  readonly meta: string;
  readonly stats: string;
  readonly wake: string;
  readonly orphans: string;
  readonly jobPrefix: string;
  readonly claimreqPrefix: string;
  /** KEYS[1..7] of every script, in the protocol's order. */
  readonly queue: readonly string[];

  constructor(readonly tag: string, readonly prefix = 'jq') {
    if (tag.length === 0) throw new Error('jobqueue: invalid tag: expected a non-empty hash tag');
    if (/[{}]/.test(tag)) throw new Error(`jobqueue: invalid tag: ${JSON.stringify(tag)} holds a brace`);
    this.base = `${prefix}:{${tag}}:`;
    this.pending = this.base + 'pending';
    this.processing = this.base + 'processing';
    this.delayed = this.base + 'delayed';
    this.dead = this.base + 'dead';
    this.meta = this.base + 'meta';
    this.stats = this.base + 'stats';
    this.wake = this.base + 'wake';
    this.orphans = this.base + 'orphans';
    this.jobPrefix = this.base + 'job:';
    this.claimreqPrefix = this.base + 'claimreq:';
    this.queue = [this.pending, this.processing, this.delayed, this.dead, this.meta, this.stats, this.wake];
  }

  job(id: JobId): string | Buffer {
    return typeof id === 'string' ? this.jobPrefix + id : Buffer.concat([Buffer.from(this.jobPrefix), id]);
  }

  claimreq(request: string): string {
    return this.claimreqPrefix + request;
  }
}
