import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

/**
 * Sandboxes die with the server, even on SIGKILL. bwrap 0.8's --die-with-parent ties the sandbox to the outer bwrap
 * only, not the outer bwrap to its parent; and a parent-death signal set before exec does not help as root, because
 * bwrap's capability drop clears it. So one small detached watchdog shell per server holds the set of live outer-bwrap
 * pids (`+ pid` / `- pid` lines on its stdin). When the server dies, however it dies, the watchdog's stdin reaches EOF
 * and it SIGKILLs every registered bwrap and its direct children (the sandbox's pid 1: killing it ends the whole pid
 * namespace; as root, bwrap's own capability drop can clear the parent-death signal of that pid 1 as well).
 */
const SCRIPT = `p=' '
while read -r op pid; do
  case "$op" in
    +) p="$p$pid " ;;
    -) case "$p" in *" $pid "*) p="\${p%% $pid *} \${p#* $pid }" ;; esac ;;
  esac
done
for b in $p; do
  kids=$(cat /proc/$b/task/*/children 2>/dev/null)
  kill -9 $b $kids 2>/dev/null
done
exit 0`;

let dog: ChildProcess | undefined;

function watchdog(): ChildProcess | undefined {
  if (dog && dog.exitCode === null && dog.signalCode === null && dog.stdin?.writable) return dog;
  try {
    const d = spawn('/bin/sh', ['-c', SCRIPT], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
    d.on('error', () => {
      if (dog === d) dog = undefined;
    });
    d.on('exit', () => {
      if (dog === d) dog = undefined;
    });
    d.stdin!.on('error', () => {});
    d.unref();
    (d.stdin as unknown as { unref?: () => void }).unref?.();
    dog = d;
    return d;
  } catch {
    return undefined;
  }
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * Registers the outer bwrap pid of a running sandbox, and (as soon as it exists) the sandbox's pid 1, its child: the
 * outer bwrap may be killed first by a parent-death signal of the spawner, and as root the pid 1's own parent-death
 * signal is cleared by bwrap's capability drop. The returned function unregisters them (idempotent).
 */
export function watchSandbox(pid: number): () => void {
  const d = watchdog();
  if (!d || !(pid > 0)) return () => {};
  const pids = [pid];
  d.stdin!.write(`+ ${pid}\n`);
  let done = false;
  const deadline = Date.now() + 2000;
  const poll = () => {
    if (done) return;
    const kids = childrenOf(pid);
    if (kids.length > 0) {
      for (const k of kids) {
        pids.push(k);
        if (dog === d && d.stdin!.writable) d.stdin!.write(`+ ${k}\n`);
      }
      return;
    }
    if (Date.now() < deadline) setTimeout(poll, 2).unref();
  };
  poll();
  return () => {
    if (done) return;
    done = true;
    if (dog === d && d.stdin!.writable) for (const p of pids) d.stdin!.write(`- ${p}\n`);
  };
}

/** The watchdog's pid (tests). */
export function watchdogPid(): number | undefined {
  return dog?.pid;
}
