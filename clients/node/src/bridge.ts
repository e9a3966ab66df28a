// A line-oriented bridge to this package's script-calling layer, for the repository's
// conformance cases (tests/conformance/node_bridge.py runs them through it).
//
//   node dist/src/bridge.js --url redis://127.0.0.1:PORT
//
// Reads one JSON object per line on stdin, `{"script": NAME, "keys": [HEX…], "args":
// [HEX…]}` (every key and argument as the hex of its bytes, ARGV[1] included), calls
// the script with `callScript` (EVALSHA, EVAL on NOSCRIPT), and writes one JSON line:
// `{"ok": REPLY}` with bulk strings as `{"b": HEX}`, integers as numbers, nil as null
// and arrays as arrays, or `{"err": MESSAGE}` with Redis's error text.
import { createInterface } from 'node:readline';
import { connect } from './connect';
import { callScript, type Reply, type ScriptName } from './scripts';

function encode(r: Reply): unknown {
  if (Buffer.isBuffer(r)) return { b: r.toString('hex') };
  if (Array.isArray(r)) return r.map(encode);
  return r;
}

async function main() {
  const i = process.argv.indexOf('--url');
  const client = connect({ url: i >= 0 ? process.argv[i + 1] : undefined });
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line.trim()) continue;
    let out: unknown;
    try {
      const req = JSON.parse(line) as { script: ScriptName; keys: string[]; args: string[] };
      const hex = (h: string) => Buffer.from(h, 'hex');
      out = { ok: encode(await callScript(client, req.script, req.keys.map(hex), req.args.map(hex))) };
    } catch (err) {
      out = { err: err instanceof Error ? err.message : String(err) };
    }
    process.stdout.write(JSON.stringify(out) + '\n');
  }
  client.disconnect();
}

void main();
