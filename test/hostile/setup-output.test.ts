/**
 * What a failed sandbox setup wrote goes into the start's error and the server's log (processMethods.ts setupOutput).
 * Its writer is bwrap echoing paths a hostile repository named, or, where the command may already run when the setup
 * fails (the Landlock backend's managed network), the command itself. Fed here: megabytes of random bytes (invalid
 * UTF-8, NULs, escapes), a hundred thousand lines, one line of 2 MiB, line separators of every kind. The error stays
 * one line of bounded length with no control characters, and the process is gone.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, describe, test } from 'node:test';
import { failingSetup } from '../helpers/failingSetup.js';
import { alive, startTestServer, tempDir, until } from '../helpers/server.js';
import { startParams as params } from '../helpers/startParams.js';

const PREFIX = 'sandbox setup failed: sandbox setup: the process exited during setup';

const WRITERS: [string, string][] = [
  ['4 MiB of random bytes', 'head -c 4194304 /dev/urandom >&2'],
  ['100 000 lines', 'seq 100000 >&2'],
  ['one line of 2 MiB', "head -c 2097152 /dev/zero | tr '\\0' y >&2"],
  [
    'every separator',
    "printf 'a\\r\\nb\\342\\200\\250c\\342\\200\\251d\\302\\205e\\033]0;title\\007f\\0g' >&2",
  ],
];

describe('what a failed sandbox setup wrote, in its error', () => {
  const dirs: { path: string; cleanup(): void }[] = [];
  after(() => {
    for (const d of dirs) d.cleanup();
  });

  for (const [name, script] of WRITERS)
    test(name, async () => {
      const dir = tempDir();
      dirs.push(dir);
      const f = failingSetup(dir.path, script);
      const ts = await startTestServer({ preparer: f.preparer });
      try {
        const c = await ts.client();
        const e = await c.requestError('process/start', params('p', ['/bin/true']));
        assert.equal(e.code, -32603);
        assert.ok(e.message.startsWith(`${PREFIX} (it wrote: `), e.message.slice(0, 200));
        assert.ok(e.message.endsWith(')'));
        assert.ok(e.message.length <= PREFIX.length + 520, `${e.message.length} characters`);
        assert.doesNotMatch(e.message, /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/);
        const pid = Number(readFileSync(f.pidFile, 'utf8'));
        await until(() => !alive(pid), 5000, 'the process to be killed');
      } finally {
        await ts.close();
      }
    });
});
