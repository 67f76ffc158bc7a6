#!/usr/bin/env node
// Brings what a fresh Debian machine lacks for the tests: bubblewrap (sandbox tests), Chromium (panel tests) and
// iproute2 (`ip link set lo up` in the network namespaces of the Codex and Kubernetes rigs) and bindfs (a FUSE mount:
// the hostile tests' workspace on a filesystem inotify does not see).
// As root it installs them with apt-get; otherwise it names the exact command and fails.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const needed = [
  { path: '/usr/bin/bwrap', pkg: 'bubblewrap' },
  { path: '/usr/bin/chromium', pkg: 'chromium' },
  { path: '/usr/bin/nsenter', pkg: 'util-linux' },
  { path: '/usr/sbin/ip', pkg: 'iproute2' },
  { path: '/usr/bin/bindfs', pkg: 'bindfs' },
];
const missing = needed.filter((n) => !existsSync(n.path)).map((n) => n.pkg);
if (missing.length > 0) {
  const cmd = `apt-get update && apt-get install -y --no-install-recommends ${missing.join(' ')}`;
  if (process.getuid?.() === 0) {
    console.log(`pretest: installing ${missing.join(', ')}`);
    execFileSync('sh', ['-c', `DEBIAN_FRONTEND=noninteractive ${cmd}`], { stdio: 'inherit' });
  } else {
    console.error(`pretest: missing ${missing.join(', ')}. Install them as root:\n  sudo sh -c '${cmd}'`);
    process.exit(1);
  }
}
const r = spawnSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);
