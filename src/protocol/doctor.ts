/**
 * What `corral doctor` reports (src/doctor.ts): printed with --json, and the `doctor` member of host/info that the
 * panel's host info shows. Pure: no Node imports.
 */
import { z } from 'zod';
import { SandboxGuarantees, WeakerGuarantee } from './exec.js';

export const DoctorCheck = z.object({
  id: z.string(),
  title: z.string(),
  /** `missing`: something a sandbox (or the panel) needs is not there; `info`: worth knowing, nothing to fix. */
  status: z.enum(['ok', 'missing', 'info']),
  detail: z.string(),
  /** The one line that fixes it (missing only). */
  fix: z.string().optional(),
});
export type DoctorCheck = z.infer<typeof DoctorCheck>;

/** What a policy type got when the doctor started `/bin/true` under it here. */
export const PolicyOutcome = z.object({
  policy: z.string(),
  sandbox: z.enum(['bwrap', 'landlock', 'seatbelt', 'unwrapped', 'refused']),
  detail: z.string(),
  guarantees: SandboxGuarantees.optional(),
});
export type PolicyOutcome = z.infer<typeof PolicyOutcome>;

export const DoctorReport = z.object({
  platform: z.string(),
  arch: z.string(),
  kernel: z.string(),
  uid: z.number(),
  container: z.object({ inside: z.boolean(), evidence: z.array(z.string()) }),
  checks: z.array(DoctorCheck),
  policies: z.array(PolicyOutcome),
  /** The sandbox options the report was made with (the server's own, in host/info). */
  options: z.object({ fallback: z.enum(['landlock', 'none']), acceptWeaker: z.array(WeakerGuarantee) }),
});
export type DoctorReport = z.infer<typeof DoctorReport>;
