/**
 * A battery of requests made by one process, every prompt it raises answered `denyOnce` as it comes: the endpoint
 * tests' way to see which spellings a rule decides (a status) and which it leaves to a prompt (the prompts).
 */
import type { ApprovalPrompt } from '../../src/protocol/approvals.js';
import type { RpcClient } from './client.js';
import { until } from './server.js';

/**
 * After `start` has started process `id` (whose requests print `label=<status>` lines), answers each of its prompts
 * `denyOnce` until it ends; the status per label and the prompts, in order.
 */
export async function runDenyingPrompts(
  agent: RpcClient,
  panel: RpcClient,
  pendingOf: (panel: RpcClient, id: string) => Promise<ApprovalPrompt[]>,
  id: string,
  start: () => Promise<unknown>,
): Promise<{ codes: Map<string, string>; prompts: ApprovalPrompt[] }> {
  await start();
  let finished = false;
  const done = agent.collect(id, 120_000).then(() => {
    finished = true;
  });
  const prompts: ApprovalPrompt[] = [];
  while (!finished) {
    await until(
      async () => finished || (await pendingOf(panel, id)).length > 0,
      60_000,
      'a prompt or the end',
    );
    for (const p of await pendingOf(panel, id)) {
      prompts.push(p);
      await panel.request('approvals/decide', { id: p.id, decision: 'denyOnce' }).catch(() => {});
    }
  }
  await done;
  const codes = new Map<string, string>();
  for (const m of agent.output(id, 'stdout').matchAll(/^(\w+)=(\d+)$/gm)) codes.set(m[1]!, m[2]!);
  return { codes, prompts };
}

/**
 * The path spellings tried against a `/api` allow (plain HTTP and inside intercepted TLS alike): `within` are at or
 * below `/api` once normalised; `outside` must never pass it (a neighbour, `..` in every spelling, an encoded slash,
 * backslash, `?`, double encoding, `..;`).
 */
export const API_SPELLINGS: { within: [string, string][]; outside: [string, string][] } = {
  within: [
    ['exact', '/api'],
    ['below', '/api/v2/y?z=/../../admin'],
    ['doubled', '//api//v2'],
    ['dotted', '/api/./v2'],
    ['escaped', '/%61pi/v2'],
  ],
  outside: [
    ['apix', '/apix'],
    ['up', '/api/../admin'],
    ['encdots', '/api/%2e%2e/admin'],
    ['encslash', '/api%2F..%2Fadmin'],
    ['backslash', '/api/..%5Cadmin'],
    ['double', '/api/%252e%252e/admin'],
    ['semicolon', '/api/..;/admin'],
    ['encquery', '/api%3F/../admin'],
  ],
};

/** The spellings of `/admin` a deny of it must cover (`denied`), and its neighbour `/adminx`, which it must not. */
export const ADMIN_SPELLINGS: { denied: [string, string][]; neighbour: [string, string] } = {
  denied: [
    ['plain', '/admin'],
    ['below', '/admin/x'],
    ['up', '/x/../admin/y'],
    ['encdots', '/x/%2e%2e/admin'],
    ['escaped', '/%61dmin'],
    ['doubled', '//admin'],
    ['encslash', '/x%2F..%2Fadmin'],
    ['semicolon', '/x/..;/admin'],
    ['double', '/x/%252e%252e/admin'],
  ],
  neighbour: ['adminx', '/adminx'],
};
