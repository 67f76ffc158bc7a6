/**
 * §11.6: whether a failed sandboxed command was probably stopped by the sandbox. A heuristic: a sandbox was active,
 * the exit code is non-zero, and the retained output shows a denial (EROFS, EACCES, EPERM, EBUSY) or a bwrap setup
 * error. `bwrap: execvp <cmd>: No such file or directory` is a missing command, not a denial.
 */
const DENIAL_TEXTS = [
  'Read-only file system',
  'Permission denied',
  'Operation not permitted',
  'Device or resource busy',
];

export function isLikelySandboxDenied(
  sandboxActive: boolean,
  exitCode: number | null,
  outputText: string,
): boolean {
  if (!sandboxActive || exitCode === 0 || exitCode === null) return false;
  if (DENIAL_TEXTS.some((t) => outputText.includes(t))) return true;
  for (const line of outputText.split('\n')) {
    const m = /^bwrap: (.*)$/.exec(line.trim());
    if (!m) continue;
    if (/^execvp .*: No such file or directory/.test(m[1]!)) continue;
    return true;
  }
  return false;
}
