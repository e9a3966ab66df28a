// Connections: a standalone server, a Redis Cluster, or a Sentinel-managed primary, with
// passwords, ACL users and TLS, all through ioredis. Whatever the options, ioredis never
// resends a command whose reply was lost on a broken connection
// (autoResendUnfulfilledCommands: false): a resent enqueue, ack or fail would be answered
// as if the first had not run (docs/protocol.md, Retrying a claim). Following a Cluster
// MOVED or ASK stays on, since those say the command did not run.
import { readFileSync } from 'node:fs';
import Redis, { Cluster, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { Client } from './scripts';

export interface TlsFiles {
  /** CA certificate(s) (PEM text or Buffer), or `caFile`. */
  ca?: string | Buffer;
  caFile?: string;
  /** Client certificate and key for mutual TLS (PEM), or their files. */
  cert?: string | Buffer;
  certFile?: string;
  key?: string | Buffer;
  keyFile?: string;
  servername?: string;
  rejectUnauthorized?: boolean;
}

export interface ConnectOptions {
  /**
   * `redis://[user:password@]host:port[/db]`, `rediss://…` for TLS. With `cluster`, a
   * comma-separated list of seed nodes. Not used with `sentinels`.
   */
  url?: string;
  /** Connect to a Redis Cluster through the seed nodes of `url`. */
  cluster?: boolean;
  /** Sentinels (`host:port,…` or a list): the primary named `masterName` is followed through failovers. */
  sentinels?: string | { host: string; port: number }[];
  masterName?: string;
  sentinelUsername?: string;
  sentinelPassword?: string;
  /** ACL user and password (they override the URL's). */
  username?: string;
  password?: string;
  /** TLS (implied by `rediss://`). */
  tls?: TlsFiles | boolean;
  /** Anything else for ioredis (each node's options on a Cluster). */
  redisOptions?: RedisOptions;
  clusterOptions?: ClusterOptions;
}

function tlsOptions(tls: TlsFiles | boolean | undefined, fromUrl: boolean): RedisOptions['tls'] | undefined {
  if (!tls && !fromUrl) return undefined;
  const t: TlsFiles = typeof tls === 'object' ? tls : {};
  const read = (v: string | Buffer | undefined, file: string | undefined) => v ?? (file ? readFileSync(file) : undefined);
  const out: Record<string, unknown> = {};
  const ca = read(t.ca, t.caFile);
  const cert = read(t.cert, t.certFile);
  const key = read(t.key, t.keyFile);
  if (ca) out.ca = ca;
  if (cert) out.cert = cert;
  if (key) out.key = key;
  if (t.servername) out.servername = t.servername;
  if (t.rejectUnauthorized !== undefined) out.rejectUnauthorized = t.rejectUnauthorized;
  return out as RedisOptions['tls'];
}

function hostPorts(list: string | { host: string; port: number }[]): { host: string; port: number }[] {
  if (typeof list !== 'string') return list;
  return list.split(',').map((s) => {
    const hp = s.trim().replace(/^rediss?:\/\//, '').replace(/\/.*$/, '');
    const at = hp.lastIndexOf('@');
    const bare = at >= 0 ? hp.slice(at + 1) : hp;
    const colon = bare.lastIndexOf(':');
    if (colon < 0) throw new Error(`jobqueue: invalid node ${JSON.stringify(s)}: expected host:port`);
    return { host: bare.slice(0, colon), port: Number(bare.slice(colon + 1)) };
  });
}

/** The options every connection of this package gets, whatever the caller's. */
const SAFE: RedisOptions = { autoResendUnfulfilledCommands: false };

/** A connection as the options say. The caller owns it (`quit()` when done). */
export function connect(opts: ConnectOptions = {}): Client {
  const url = opts.url ?? process.env.JOBQUEUE_REDIS_URL ?? 'redis://127.0.0.1:6379';
  const first = url.split(',')[0].trim();
  const secure = first.startsWith('rediss://');
  const base: RedisOptions = { ...opts.redisOptions };
  const parsed = opts.sentinels ? undefined : new URL(first);
  const username = opts.username ?? (parsed?.username ? decodeURIComponent(parsed.username) : undefined);
  const password = opts.password ?? (parsed?.password ? decodeURIComponent(parsed.password) : undefined);
  if (username) base.username = username;
  if (password) base.password = password;
  const tls = tlsOptions(opts.tls, secure);
  if (tls) base.tls = tls;
  Object.assign(base, SAFE);
  if (opts.sentinels) {
    if (!opts.masterName) throw new Error('jobqueue: invalid sentinels: a masterName is needed with sentinels');
    return new Redis({
      ...(base as object),
      sentinels: hostPorts(opts.sentinels),
      name: opts.masterName,
      sentinelUsername: opts.sentinelUsername,
      sentinelPassword: opts.sentinelPassword,
      sentinelTLS: tls as RedisOptions['sentinelTLS'],
      enableTLSForSentinelMode: !!tls,
    });
  }
  if (opts.cluster) {
    return new Cluster(hostPorts(url), { ...opts.clusterOptions, redisOptions: base });
  }
  const db = parsed && parsed.pathname.length > 1 ? Number(parsed.pathname.slice(1)) : undefined;
  return new Redis({ ...base, host: parsed!.hostname, port: Number(parsed!.port || 6379), db });
}
