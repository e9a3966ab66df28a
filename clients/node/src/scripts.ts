// The one way this package runs a protocol script: EVALSHA with the embedded script's
// SHA-1, and on NOSCRIPT (a restarted or failed-over server, a new Cluster node) EVAL of
// its source, which loads it. NOSCRIPT says the script did not run, so that second send
// is safe; no other reply or error is ever resent here (docs/protocol.md, Retrying a claim).
import type { Cluster, Redis } from 'ioredis';
import { SCRIPTS, type ScriptName } from './scripts.generated';

export { SCRIPTS, type ScriptName };

export type Client = Redis | Cluster;
export type Arg = string | Buffer | number;
/** A script's reply as ioredis gives it with Buffer replies: Buffer, number, null, arrays. */
export type Reply = Buffer | number | null | Reply[];

export function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

/**
 * Run script `name` with these KEYS and ARGV (ARGV[1], the job-key prefix, included:
 * callers pass everything the protocol names). Bulk strings come back as Buffers.
 */
export async function callScript(
  client: Client,
  name: ScriptName,
  keys: readonly (string | Buffer)[],
  args: readonly Arg[],
): Promise<Reply> {
  const script = SCRIPTS[name];
  if (!script) throw new Error(`jobqueue: no script named ${JSON.stringify(name)}`);
  try {
    return (await client.callBuffer('evalsha', [script.sha, keys.length, ...keys, ...args])) as Reply;
  } catch (err) {
    if (!isNoScript(err)) throw err;
    return (await client.callBuffer('eval', [script.source, keys.length, ...keys, ...args])) as Reply;
  }
}

/**
 * The same call followed by `WAIT replicas timeoutMs` on the same connection, in the same
 * round trip (a pipeline): the script's reply and how many replicas confirmed it.
 */
export async function callScriptAndWait(
  client: Client,
  name: ScriptName,
  keys: readonly (string | Buffer)[],
  args: readonly Arg[],
  replicas: number,
  timeoutMs: number,
): Promise<{ reply: Reply; confirmed: number }> {
  const script = SCRIPTS[name];
  const run = async (how: 'evalsha' | 'eval') => {
    const res = (await client
      .pipeline()
      .callBuffer(how, [how === 'evalsha' ? script.sha : script.source, keys.length, ...keys, ...args])
      .call('WAIT', String(replicas), String(timeoutMs))
      .exec())!;
    const [[err, reply], [werr, confirmed]] = res;
    if (err) throw err;
    if (werr) throw werr;
    return { reply: reply as Reply, confirmed: Number(confirmed) };
  };
  try {
    return await run('evalsha');
  } catch (err) {
    if (!isNoScript(err)) throw err;
    return run('eval');
  }
}
