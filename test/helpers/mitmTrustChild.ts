// The interception trust of a process of its own (src/network/mitm/trust.ts mitmTrust), for the test that its files
// go with the process: prints one JSON line (the CA file, the bundle, whether both exist), then exits as `how` says
// (`return`: the event loop ends; `exit`: process.exit(0), as a server stopped by a signal does).
import { existsSync } from 'node:fs';
import { mitmTrust } from '../../src/network/mitm/trust.js';

const trust = mitmTrust();
const files = [trust.caPath, trust.bundlePath()];
process.stdout.write(`${JSON.stringify({ files, existed: files.map((f) => existsSync(f)) })}\n`);
if (process.argv[2] === 'exit') process.exit(0);
