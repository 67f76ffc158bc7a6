/**
 * The Noise transport's cost on the executor (docs/remote-noise.md): CPU time of one hybrid IK responder handshake
 * (read msg 1 + complete: one ML-KEM decapsulation, two encapsulations, one ML-KEM and one X25519 key generation,
 * four X25519), of a refused request (a bit flipped in the harness's static key: it fails at the first tag check), and
 * of the transport on 60 KiB records (encrypt + decrypt with Node's AES-256-GCM; reference: @noble/ciphers' GCM on the
 * same records). CPU time of this process,
 * which is the honest figure on a shared machine. `npm run bench -- noise-handshake`.
 */
import { gcm } from '@noble/ciphers/aes.js';
import {
  generateIdentity,
  InitiatorHandshake,
  noiseChannelPrologue,
  PendingResponderHandshake,
} from '../../src/remote/noiseChannel.js';
import type { BenchRow } from './types.js';

function cpuMs(f: () => void): number {
  const t = process.cpuUsage();
  f();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
}

export async function run(): Promise<BenchRow[]> {
  const executor = generateIdentity();
  const harness = generateIdentity();
  const key = { dh: executor.dh.publicKey, kem: executor.kem.publicKey };
  const prologue = noiseChannelPrologue('env', 'reg', 'stream');
  const n = 50;
  const starts = Array.from({ length: n + 10 }, () =>
    InitiatorHandshake.start(harness, key, prologue, Buffer.from('authorization')),
  );
  for (const s of starts.slice(0, 10))
    PendingResponderHandshake.readRequest(executor, prologue, s.request).complete();
  const accepted = cpuMs(() => {
    for (const s of starts.slice(10))
      PendingResponderHandshake.readRequest(executor, prologue, s.request).complete();
  });
  const bad = Uint8Array.from(starts[0]!.request);
  bad[2000]! ^= 1;
  const refused = cpuMs(() => {
    for (let i = 0; i < n; i++)
      try {
        PendingResponderHandshake.readRequest(executor, prologue, bad);
      } catch {}
  });
  const s = starts[0]!;
  const done = PendingResponderHandshake.readRequest(executor, prologue, s.request).complete();
  const h = s.handshake.finish(done.response);
  const record = new Uint8Array(60 * 1024);
  const records = 100;
  const transport = cpuMs(() => {
    for (let i = 0; i < records; i++) done.transport.decrypt(h.encrypt(record));
  });
  // Reference: the same records through @noble/ciphers' AES-256-GCM (what noiseChannel.ts used before).
  const k = new Uint8Array(32).fill(7);
  const iv = new Uint8Array(12);
  const noble = cpuMs(() => {
    for (let i = 0; i < records; i++) gcm(k, iv).decrypt(gcm(k, iv).encrypt(record));
  });
  const mib = (records * record.length) / (1024 * 1024);
  return [
    {
      section: 'noise-handshake',
      metric: 'executor handshake (read + complete)',
      corral: accepted / n,
      unit: 'ms CPU',
    },
    {
      section: 'noise-handshake',
      metric: 'refused request (bad static key)',
      corral: refused / n,
      unit: 'ms CPU',
    },
    {
      section: 'noise-handshake',
      metric: 'transport, encrypt + decrypt',
      corral: transport / mib,
      reference: noble / mib,
      unit: 'ms CPU / MiB (reference: @noble/ciphers gcm)',
    },
  ];
}
