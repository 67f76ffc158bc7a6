/**
 * Listening sockets inside another process's network namespace (src/platform/native/netns.c: a thread that setns()s
 * into it, binds and hands the fds back), for the managed network of a sandbox. Node cannot enter a namespace;
 * without the addon src/sandbox/linux/managedNet.ts starts a forwarder process in the namespace instead.
 */
import { addon } from './addon.js';

/**
 * Listening TCP sockets on 127.0.0.1:port in pid's network namespace, one fd per port; throws an Error with `errno`
 * when that fails. Null without the addon.
 */
export const listenInNetns: ((pid: number, ports: number[]) => number[]) | null = addon
  ? addon.listenInNetns.bind(addon)
  : null;
