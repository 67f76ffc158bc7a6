/** Wire shape of `host/info` (panel connections): what the panel's "Connect an agent" box shows. Pure. */
import { z } from 'zod';

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
});
export type HostInfo = z.infer<typeof HostInfo>;
