// The protocol reference (docs/protocol.md, docs/schema/) is generated from the zod schemas and the method table, and
// `npm test` fails while it is not current: here, against a copy, the check passes on what the generator wrote and
// fails, naming the file and saying how to mend it, on an edited, a missing or a stray file.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { METHODS, NOTIFICATIONS } from '../../src/protocol/methods.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const script = join(root, 'scripts', 'protocol-docs.ts');
const out = mkdtempSync(join(tmpdir(), 'corral-docs-'));
after(() => rmSync(out, { recursive: true, force: true }));

function docs(...args: string[]): { status: number | null; stderr: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: root,
    encoding: 'utf8',
  });
  return { status: r.status, stderr: r.stderr };
}

describe('protocol reference', () => {
  test('the reference in docs/ is current', () => {
    const r = docs('--check');
    assert.equal(r.stderr, '');
    assert.equal(r.status, 0);
  });

  test('it names every method with its caller, params and result, and every notification', () => {
    const md = readFileSync(join(root, 'docs', 'protocol.md'), 'utf8');
    for (const [name, m] of Object.entries(METHODS)) {
      assert.match(md, new RegExp(`^### \`${name}\`$`, 'm'), name);
      const row = md.split('\n').find((l) => l.startsWith(`| [\`${name}\`]`));
      assert.ok(row, `${name} is in the table`);
      assert.match(
        row,
        m.caller === 'panel' ? /panel only/ : m.caller === 'agent' ? /agent or panel/ : /first/,
      );
    }
    for (const name of Object.keys(NOTIFICATIONS))
      assert.match(md, new RegExp(`^\\| \`${name}\` \\|`, 'm'), name);
    assert.match(md, /^\| -32602 \| InvalidParams \|/m);
    assert.match(md, /^\| \[ReadResult\]\(#schema-readresult\) \| `outputEvicted` \| \*\*Corral\*\* \|/m);
    assert.match(md, /^\| \[StartResult\]\(#schema-startresult\) \| `sandboxType` \| 0\.169 \|/m);
    const exec = JSON.parse(readFileSync(join(root, 'docs', 'schema', 'ExecParams.json'), 'utf8'));
    assert.deepEqual(exec.required, ['processId', 'argv', 'cwd', 'env', 'tty']);
    assert.deepEqual(exec.properties.sandbox.$ref, 'SandboxParam.json');
  });

  test('the check fails on an edited, a missing or a stray file, and says to run npm run docs', () => {
    assert.equal(docs('--out', out).status, 0);
    assert.deepEqual(docs('--check', '--out', out), { status: 0, stderr: '' });

    appendFileSync(join(out, 'protocol.md'), '\nhand-edited\n');
    let r = docs('--check', '--out', out);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /protocol\.md differs\): run npm run docs/);

    assert.equal(docs('--out', out).status, 0);
    const one = readdirSync(join(out, 'schema'))[0]!;
    rmSync(join(out, 'schema', one));
    writeFileSync(join(out, 'schema', 'Gone.json'), '{}\n');
    r = docs('--check', '--out', out);
    assert.equal(r.status, 1);
    assert.match(r.stderr, new RegExp(`schema/${one.replace('.', '\\.')} is missing`));
    assert.match(r.stderr, /schema\/Gone\.json names no shape/);
    assert.match(r.stderr, /run npm run docs/);
  });
});
