import type { SandboxGuarantees } from '../protocol/exec.js';

/**
 * The one description of "what to exec" shared by the process manager, the spawners (node child_process, the native
 * fast spawner, node-pty) and the sandbox transform. A sandbox turns a LaunchSpec into another LaunchSpec (bwrap …).
 */
export interface LaunchSpec {
  /** Absolute path of the program to exec (already resolved against the child's PATH). */
  file: string;
  /** The full argv the program sees, argv[0] included (argv[0] may differ from `file`: that is arg0). */
  argv: string[];
  /** The child's complete environment: nothing is inherited implicitly. */
  env: Record<string, string>;
  /** Absolute working directory. */
  cwd: string;
  /**
   * Extra file descriptors the child receives at 3, 4, 5, …: each entry is an open fd of this process (or null to leave
   * the slot closed). The launcher closes nothing: whoever opened them closes them after spawn.
   */
  extraFds?: (number | null)[];
  /**
   * The child joins a new anonymous session keyring before exec (sandboxed children: they must not possess the
   * server's). The native spawner does it in the child; node-pty and child_process go through the sandbox launcher
   * (src/platform/native/launcher.c), which then also becomes argv[0]'s program: use it with argv[0] === file.
   */
  freshSessionKeyring?: boolean;
  /**
   * The Landlock backend: the child confines itself right before exec (no new privileges, no capabilities, the
   * Landlock ruleset at `rulesetFd` — an fd of this process, closed by whoever opened it after the spawn — then the
   * seccomp program). The native spawner does it in the child; node-pty and child_process go through the sandbox
   * launcher. Never together with `extraFds`.
   */
  confine?: {
    rulesetFd: number;
    seccomp: Buffer;
    flags?: number;
    /** Managed network under Landlock: the command's end of the connect supervisor's channel (platform/netNotify.ts). */
    netNotifyFd?: number;
  };
  /**
   * The `file` and `cwd` that resolveProgram and checkCwd found usable (a program to execute, a directory to enter) in
   * this turn of the event loop, set by whoever checked them right before the spawn: the native spawner does not check
   * the same two paths again (issue 32: four system calls per start). A spec derived from this one (a sandbox's
   * wrapper, another cwd) names other paths and is checked as always.
   */
  checked?: { file: string; cwd: string };
}

/** Which isolation actually applies to a started process, as reported in `process/start` and to the panel. */
export type SandboxType = 'none' | 'linuxSeccomp' | 'macosSeatbelt';

/** The result of applying a sandbox (or none) to a command: what to exec, plus hooks around the spawn. */
export interface PreparedLaunch {
  spec: LaunchSpec;
  sandboxType: SandboxType;
  /** A short human summary of the effective policy for the panel (writable roots, network mode, …). */
  summary?: Record<string, unknown>;
  /** Which backend enforced it and the accepted weaker guarantees that apply (the Landlock backend only). */
  guarantees?: SandboxGuarantees;
  /** What the start accepted but cannot fully honour: said in process/start's result (and on the panel). */
  warnings?: string[];
  /** Called once the child has a pid (e.g. to start a forwarder in its network namespace and release it). */
  afterSpawn?(pid: number): Promise<void>;
  /** Called exactly once after the process has closed, or if the spawn failed. Must not throw. */
  cleanup(): void;
}
