/** Wire shape of `host/info` (panel connections): what the panel's "Connect an agent" box shows. Pure. */
import { z } from 'zod';

/** What bounds each command (src/process/cgroup.ts), or why nothing does. */
export const ResourceLimitsInfo = z.object({
  /** The cgroup API in use; `none`: commands run without pids and memory limits. */
  version: z.enum(['v2', 'v1', 'none']),
  /** The limits that are enforced. */
  enforced: z.array(z.enum(['pids', 'memory'])),
  /** The server's cgroup directories (one per hierarchy). */
  dirs: z.array(z.string()),
  /** Why cgroups, or one of the limits, cannot be used; null when everything works. */
  problem: z.string().nullable(),
  /** The pids.max a command gets (and the most it may ask for); null when not enforced. */
  pidsMax: z.number().nullable(),
  /** The memory limit a command gets (and the most it may ask for), bytes; null when not enforced. */
  memoryMaxBytes: z.number().nullable(),
  /**
   * Whether the server's commands all run in one CPU group, so that together they weigh as one program against the
   * user's others (however many sessions they start).
   */
  cpuGroup: z.boolean(),
  /** Why they are not; null when they are. */
  cpuProblem: z.string().nullable(),
});
export type ResourceLimitsInfo = z.infer<typeof ResourceLimitsInfo>;

export const HostInfo = z.object({
  /** ws://127.0.0.1:P/?token=<agent token>: what an agent's exec-server client connects to. */
  execUrl: z.string(),
  /** http://127.0.0.1:P/panel/#token=<panel token>, when the host serves the panel. */
  panelUrl: z.string().nullable(),
  logFile: z.string().nullable(),
  mode: z.enum(['desktop', 'headless']),
  pid: z.number(),
  platform: z.string(),
  version: z.string(),
  resourceLimits: ResourceLimitsInfo,
});
export type HostInfo = z.infer<typeof HostInfo>;
