/** JSON-RPC error codes used on the wire (protocol.md §9). */
export const ErrorCode = {
  /** Lifecycle violations, unknown ids, duplicates, limits, unparseable frames (with id -1), panel-only methods. */
  InvalidRequest: -32600,
  /** No such method (checked before the handshake): ``exec-server stub does not implement `<method>` yet``. */
  MethodNotFound: -32601,
  /** Params that do not fit their schema, in serde's words naming the member; also bad base64. */
  InvalidParams: -32602,
  /** What could not be done: spawn failures (the OS text), sandbox or proxy setup, fs errors, timeouts. */
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
