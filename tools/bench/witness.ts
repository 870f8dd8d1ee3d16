/**
 * What a witness costs (issue 36): Warden's POST /policy/evaluate with one witness process on
 * this machine cosigning every checkpoint (`warden witness`, as an operator runs it) against
 * the same server without one, each beside B1 in the same rounds (ab-wardens.ts). Targets: S/B1
 * with the witness ≥ 0.95 × without; checkpoint lag p99 ≤ 2 s, the cosignature included.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportSigningKey, generateSigningKey } from '../../apps/server/src/features/audit/checkpoint.ts';
import { type AbFigures, compareWardens, formatAb } from './ab-wardens.ts';
import type { BenchConfig } from './config.ts';
import { ROOT, spawnGroup, stopChild } from './procs.ts';

export interface WitnessFigures extends AbFigures {
  witness: { name: string; vkey: string };
}

export const witnessTargets = (f: WitnessFigures) => ({
  'S/B1 with one witness >= 0.95 x without': f.relative >= 0.95,
  'checkpoint lag p99 <= 2 s with the cosignature': (f.checkpointLag.on?.p99Ms ?? Number.POSITIVE_INFINITY) <= 2000,
});

/** Starts `warden witness` for the log key, on a port of its own; answers its URL and vkey. */
async function startWitness(publicKey: Buffer, register: (cleanup: () => Promise<void>) => void) {
  const dataDir = mkdtempSync(join(tmpdir(), 'warden-bench-witness-'));
  register(async () => rmSync(dataDir, { recursive: true, force: true }));
  const args = ['--import', 'tsx', join(ROOT, 'apps/server/src/cli/main.ts'), 'witness', '--name', 'bench.witness/w1'];
  args.push('--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-key', publicKey.toString('base64'), '--json');
  const child = spawnGroup(process.execPath, args, 'witness', { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  register(() => stopChild(child));
  return new Promise<{ url: string; vkey: string; name: string }>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk;
      if (out.includes('\n')) resolve(JSON.parse(out.slice(0, out.indexOf('\n'))));
    });
    child.once('exit', (code) => reject(new Error(`the witness exited (${code}) before it listened`)));
  });
}

export async function witnessBenchmark(
  config: BenchConfig,
  register: (cleanup: () => Promise<void>) => void,
  log: (message: string) => void,
): Promise<WitnessFigures> {
  const key = generateSigningKey();
  const witness = await startWitness(key.publicKey, register);
  log(`witness ${witness.name} at ${witness.url}`);
  const onEnv = { WARDEN_AUDIT_SIGNING_KEY: exportSigningKey(key), WARDEN_AUDIT_WITNESSES: `${witness.url} ${witness.vkey}` };
  const figures = await compareWardens(config, { label: 'witness', onEnv, setting: 'a witness' }, register, log);
  return { ...figures, witness: { name: witness.name, vkey: witness.vkey } };
}

export function formatWitness(f: WitnessFigures): string[] {
  return [
    `One witness (${f.witness.name}, a process on this machine) cosigning every checkpoint (closed loop, POST /policy/evaluate):`,
    ...formatAb(f, 'a witness', 'target ≥ 0.95'),
  ];
}
