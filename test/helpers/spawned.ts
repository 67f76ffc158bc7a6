/** Waiting for a spawned child (src/process/spawner.ts) to end, with everything it wrote. */
import type { SpawnedChild } from '../../src/process/spawner.js';

/** stdout and stderr as they came, then `exit N`, once the child exited and both pipes closed. */
export function outputAndExit(c: SpawnedChild): Promise<string> {
  return new Promise((resolve) => {
    let out = '';
    let open = 2;
    let code: number | undefined;
    const done = () => open === 0 && code !== undefined && resolve(`${out}exit ${code}`);
    for (const s of [c.stdout, c.stderr]) {
      s.on('data', (d: Buffer) => {
        out += d.toString();
      });
      s.on('close', () => {
        open--;
        done();
      });
    }
    c.onExit((exitCode) => {
      code = exitCode;
      done();
    });
  });
}
