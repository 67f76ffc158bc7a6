/**
 * Wire shapes of remote-executor registration (`corral exec-server --remote URL --environment-id ID
 * --remote-transport direct`), as the released Codex 0.169 executor speaks them (recorded in
 * test/fixtures/remote/codex-0.169.0-direct.json):
 *
 * - `POST {base}/cloud/environment/{environmentId}/direct/register` with `DirectRegistrationRequest`, answered with
 *   `DirectRegistrationResponse`; an error status may carry `RegistryErrorBody`.
 * - The executor then opens a WebSocket to the returned `url` and serves the exec-server protocol on it.
 *
 * Pure: no Node imports.
 */
import { z } from 'zod';

export const DIRECT_TRANSPORT = 'direct_jsonrpc_v1';

/** An environment id is one URL path component: ASCII letters, digits, `-` and `_`, at most 256 characters. */
export const EnvironmentId = z
  .string()
  .min(1, 'environment id is required for remote registration')
  .max(256, 'environment id cannot be longer than 256 characters')
  .regex(/^[A-Za-z0-9_-]+$/, "environment id must contain only ASCII letters, numbers, '-' or '_'");

export const DirectRegistrationRequest = z.object({ transport: z.literal(DIRECT_TRANSPORT) });
export type DirectRegistrationRequest = z.infer<typeof DirectRegistrationRequest>;

/** A registry's answer is hostile until parsed: every field a bounded string (extra fields are dropped). */
export const DirectRegistrationResponse = z.object({
  environment_id: z.string().max(256, 'environment_id is longer than 256 characters'),
  transport: z.string().max(256, 'transport is longer than 256 characters'),
  registration_id: z
    .string()
    .trim()
    .min(1, 'registration_id is empty')
    .max(1024, 'registration_id is longer than 1024 characters'),
  url: z.string().trim().min(1, 'url is empty').max(8192, 'url is longer than 8192 characters'),
});
export type DirectRegistrationResponse = z.infer<typeof DirectRegistrationResponse>;

/** An error answer's body; its text is quoted (cut and escaped) in the executor's message. */
export const RegistryErrorBody = z.object({
  error: z.object({ code: z.string().nullish(), message: z.string().nullish() }).nullish(),
});

/** Codex's Noise transport (`--remote-transport noise`, docs/remote-noise.md): `POST {base}/cloud/environment/{id}/register`. */
export const NOISE_SECURITY_PROFILE = 'noise_hybrid_ik_v1';

/** The registry's answer to a Noise registration (Codex's `EnvironmentRegistryRegistrationResponse`). */
export const NoiseRegistrationResponse = z.object({
  environment_id: z.string().max(256, 'environment_id is longer than 256 characters'),
  url: z.string().trim().min(1, 'url is empty').max(8192, 'url is longer than 8192 characters'),
  security_profile: z.string().max(256, 'security_profile is longer than 256 characters'),
  executor_registration_id: z
    .string()
    .min(1, 'executor_registration_id is empty')
    .max(1024, 'executor_registration_id is longer than 1024 characters'),
});
export type NoiseRegistrationResponse = z.infer<typeof NoiseRegistrationResponse>;

/** The registry's answer to `POST {base}/cloud/environment/{id}/validate` (harness-key validation). */
export const HarnessKeyValidationResponse = z.object({ valid: z.boolean() });
