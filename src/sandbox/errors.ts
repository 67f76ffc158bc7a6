/**
 * A sandbox could not be set up as requested. Its message is what the client sees (process/start → -32603).
 * Never caught to fall back to an unsandboxed run.
 */
export class SandboxSetupError extends Error {
  override readonly name = 'SandboxSetupError';
}
