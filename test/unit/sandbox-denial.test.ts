import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isLikelySandboxDenied } from '../../src/sandbox/index.js';

test('isLikelySandboxDenied: needs an active sandbox, a non-zero exit and a denial text', () => {
  assert.equal(isLikelySandboxDenied(true, 1, 'sh: 1: cannot create x: Read-only file system'), true);
  assert.equal(isLikelySandboxDenied(true, 1, 'open: Permission denied'), true);
  assert.equal(isLikelySandboxDenied(true, 1, 'PermissionError: [Errno 1] Operation not permitted'), true);
  assert.equal(isLikelySandboxDenied(true, 1, "mv: cannot move '.git': Device or resource busy"), true);
  assert.equal(
    isLikelySandboxDenied(true, 1, "bwrap: Can't find source path /nope: No such file or directory"),
    true,
  );
  assert.equal(isLikelySandboxDenied(false, 1, 'Read-only file system'), false);
  assert.equal(isLikelySandboxDenied(true, 0, 'Read-only file system'), false);
  assert.equal(isLikelySandboxDenied(true, 1, 'some other failure'), false);
  assert.equal(isLikelySandboxDenied(true, 1, 'bwrap: execvp nosuchcmd: No such file or directory\n'), false);
});
