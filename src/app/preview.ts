/** The policy debugger's preview of a launch, from the sandbox engine and the program resolver (no process made). */
import { resolveProgram } from '../process/resolveProgram.js';
import { previewLaunch, startSandbox } from '../sandbox/index.js';
import type { PreviewFn } from '../server/monitor/policyDebugger.js';

/** The policy debugger's launch preview: what the sandbox engine would exec, without creating anything. */
export const sandboxPreview: PreviewFn = ({ sandbox, argv, cwd }) => {
  const program = argv[0] ?? '/bin/sh';
  let file = program;
  try {
    file = resolveProgram(program, cwd, { PATH: process.env.PATH ?? '/usr/bin:/bin' });
  } catch {
    // show the preview with the name as given
  }
  // A Seatbelt config is previewed as macOS would run it, wherever the host runs (the debugger is for reading).
  const eff = startSandbox(sandbox, false, cwd);
  const asMac = eff?.requested === 'macos-seatbelt' && process.platform !== 'darwin';
  const p = previewLaunch(
    eff,
    { spec: { file, argv, env: {}, cwd }, tty: false },
    asMac ? { platform: 'darwin' } : undefined,
  );
  const argvOut =
    p.mechanism === 'none'
      ? null
      : [p.spec.file, ...p.spec.argv.slice(1)].map((a) =>
          p.seatbeltProfile !== undefined && a === p.seatbeltProfile ? '<the Seatbelt profile below>' : a,
        );
  return {
    sandboxType: p.sandboxType,
    summary: {
      mechanism: p.mechanism,
      ...p.summary,
      ...(p.seccomp
        ? {
            seccompFilter: `${p.seccomp.mode}, ${p.seccomp.instructions} BPF instructions (${p.seccomp.arch})`,
          }
        : {}),
      ...(p.fdSlots.length > 0 ? { fdSlots: p.fdSlots.join(', ') } : {}),
    },
    argv: argvOut,
    seatbeltProfile: p.seatbeltProfile ?? null,
    note:
      p.mechanism === 'none'
        ? 'nothing to enforce: the command runs unwrapped'
        : asMac
          ? `previewed as on macOS; this host (${process.platform}) cannot run Seatbelt`
          : null,
  };
};
