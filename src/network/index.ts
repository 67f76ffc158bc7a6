/** The managed network proxy: parse `managedNetwork` / `networkProxy`, start a proxy per process, apply its env. */
export {
  defaultSettings,
  NetworkConfigError,
  type NetworkSettings,
  parseNetworkConfig,
  validateAgainstConstraints,
} from './config.js';
export type { Dialer } from './dial.js';
export { applyProxyEnv, buildProxyEnv, DEFAULT_NO_PROXY, MANAGED_PROXY_ENV_KEYS } from './env.js';
export {
  BlockedRing,
  blockMessage,
  blockTag,
  MAX_BLOCKED_EVENTS,
  type NetworkEventMap,
  NetworkEvents,
} from './events.js';
export { canonicalIp, isNonPublicIp, normalizeHost } from './host.js';
export {
  type ManagedNetworkSpec,
  managedNetworkSandboxFact,
  parseManagedNetwork,
  parseNetworkProxy,
  parseProcessNetwork,
} from './managedNetwork.js';
export { compilePatterns, normalizePattern } from './patterns.js';
export {
  type Decider,
  type DeciderRequest,
  type DeciderResult,
  defaultResolver,
  PolicyEngine,
  type Resolver,
} from './policy.js';
export {
  DEFAULT_IDLE_TIMEOUT_MS,
  defaultDialer,
  type ManagedProxy,
  type StartProxyOptions,
  startManagedProxy,
} from './proxy.js';
export type { UpstreamSettings } from './upstream.js';
