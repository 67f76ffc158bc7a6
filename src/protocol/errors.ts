/** JSON-RPC error codes used on the wire (protocol.md §9). */
export const ErrorCode = {
  /** Invalid request: lifecycle violations, unknown ids, duplicates, unparseable frames (with id -1). */
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  /** fs target not found. Clients treat it as "absent". */
  NotFound: -32004,
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** An error that travels to the client as `{"error":{"code","message"},"id"}`. */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = 'RpcError';
  }
}

export const invalidParams = (message: string) => new RpcError(ErrorCode.InvalidParams, message);
export const invalidRequest = (message: string) => new RpcError(ErrorCode.InvalidRequest, message);
export const internalError = (message: string) => new RpcError(ErrorCode.InternalError, message);
export const methodNotFound = (method: string) =>
  new RpcError(ErrorCode.MethodNotFound, `exec-server stub does not implement \`${method}\` yet`);
