// A fleet host in a process of its own, for the tests that must see it survive what a peer sends and measure its
// memory: `node --import tsx test/helpers/fleetHostChild.ts '{"join":[…]}'` prints one JSON line (its WebSocket
// URL and both tokens), then serves until SIGTERM.
import { startHost } from '../../src/app/host.js';

const opts = JSON.parse(process.argv[2] ?? '{}') as {
  join?: { url: string; token: string; name?: string }[];
};
const host = await startHost({ join: opts.join ?? [], fleet: { backoffMs: [50, 500] }, audit: null });
process.stdout.write(
  `${JSON.stringify({ url: host.listener.url, agent: host.tokens.agent, panel: host.tokens.panel })}\n`,
);
process.on('SIGTERM', () => {
  void host.shutdown().then(() => process.exit(0));
});
