// The package embeds lua/ at build time: it must hold exactly the repository's scripts.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { SCRIPTS } from '../src';
import { REPO } from './support';

test("the embedded scripts are lua/'s, byte for byte", () => {
  const dir = join(REPO, 'lua');
  const files = readdirSync(dir).filter((f) => f.endsWith('.lua')).sort();
  assert.deepEqual(Object.keys(SCRIPTS).sort(), files.map((f) => f.slice(0, -4)), 'the set of scripts differs from lua/: run npm run build');
  for (const f of files) {
    const source = readFileSync(join(dir, f));
    const s = SCRIPTS[f.slice(0, -4) as keyof typeof SCRIPTS];
    assert.ok(Buffer.from(s.source).equals(source), `${f} differs from the package's copy: run npm run build`);
    assert.equal(s.sha, createHash('sha1').update(source).digest('hex'), `${f}: SHA-1`);
  }
});
