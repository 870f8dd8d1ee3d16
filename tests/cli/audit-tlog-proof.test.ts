/**
 * An event's inclusion as a C2SP tlog-proof file (c2sp.org/tlog-proof@v1): made by `warden audit
 * prove` (the SDK's prove against a running server, with the pinned key) and by the SDK's
 * formatTlogProof, verified offline by `warden audit verify --proof` and the SDK's
 * verifyTlogProof with the key alone; the file's layout checked here from the C2SP text; any
 * flipped byte of the signature, the proof or the event, another key, and a proof of another
 * event's bytes are refused.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateSigningKey, noteSigner } from '../../apps/server/src/features/audit/checkpoint.ts';
import { formatCosignerKey } from '../../apps/server/src/features/audit/cosignature.ts';
import { createWarden, formatTlogProof, verifyTlogProof } from '../../packages/sdk/src/index.ts';
import { useTestServer } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(ROOT, 'tools/warden.mjs');
const server = useTestServer({ auditSealIntervalMs: 50, auditCheckpointIntervalMs: 100 });
const dir = mkdtempSync(join(tmpdir(), 'warden-proof-'));
let vkey: string;
/** The log's ML-DSA-44 vkey: every checkpoint carries its signature line too. */
let mlDsaVkey: string;
let eventId: string;

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { cwd: ROOT, timeout: 120_000, env: { ...process.env, WARDEN_API_KEY: server.key } },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

beforeAll(async () => {
  const keys = (await server.api('GET', '/audit/signing-key')).body.data;
  vkey = keys.verifier_key;
  mlDsaVkey = keys.ml_dsa_44!.verifier_key;
  for (let i = 0; i < 5; i++) {
    const res = await server.api('POST', '/audit', {
      body: { agent: 'proof-bot', action: `refund.${i}`, resource: `orders/${i}`, result: 'blocked', severity: 'high' },
    });
    eventId = res.body.data.id;
  }
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The proof with one character in the middle of line `line` (counted from the top) changed: still canonical base64. */
function altered(proof: string, line: number): string {
  const lines = proof.split('\n');
  const text = lines[line] as string;
  const at = Math.floor(text.length / 2);
  lines[line] = `${text.slice(0, at)}${text[at] === 'A' ? 'B' : 'A'}${text.slice(at + 1)}`;
  return lines.join('\n');
}

describe('tlog-proof', () => {
  it('warden audit prove writes a tlog-proof that warden audit verify --proof accepts offline', { timeout: 120_000 }, async () => {
    const file = join(dir, 'event.tlog-proof');
    const proved = await run(['audit', 'prove', eventId, '--url', server.url, '--public-key', vkey, '--out', file]);
    expect(proved.stderr).toContain(`proved ${eventId}`);
    expect(proved.code).toBe(0);
    const proof = readFileSync(file, 'utf8');
    // C2SP layout: the header, extra (base64), index, one base64 SHA-256 per line, an empty line, the checkpoint verbatim
    const [head, note] = [proof.slice(0, proof.indexOf('\n\n')), proof.slice(proof.indexOf('\n\n') + 2)];
    const lines = head.split('\n');
    expect(lines[0]).toBe('c2sp.org/tlog-proof@v1');
    expect(lines[1]).toMatch(/^extra [A-Za-z0-9+/]+=*$/);
    expect(JSON.parse(Buffer.from((lines[1] as string).slice(6), 'base64').toString('utf8'))[1]).toBe(eventId);
    expect(lines[2]).toMatch(/^index (0|[1-9]\d*)$/);
    for (const hash of lines.slice(3)) expect(Buffer.from(hash, 'base64')).toHaveLength(32);
    expect(note).toMatch(/^warden\/audit\/[0-9a-f-]+\n\d+\n[A-Za-z0-9+/]+=*\n/);
    // the log's two signature lines: Ed25519, then ML-DSA-44
    expect(note).toMatch(/\n\n— \S+ [A-Za-z0-9+/]+=*\n— \S+ [A-Za-z0-9+/]+=*\n$/);

    const verified = await run(['audit', 'verify', '--proof', file, '--public-key', vkey]);
    expect(verified.stdout).toContain(`VALID: event ${eventId} is entry`);
    expect(verified.code).toBe(0);

    // with the ML-DSA-44 key alone, too
    const byMlDsa = await run(['audit', 'verify', '--proof', file, '--public-key', mlDsaVkey]);
    expect(byMlDsa.stdout, byMlDsa.stderr).toContain(`VALID: event ${eventId} is entry`);

    // a flipped byte anywhere that counts: each signature line (under its key), a proof hash, the event's bytes
    const signatureLine = proof.split('\n').length - 3;
    for (const [line, key] of [
      [signatureLine, vkey],
      [signatureLine + 1, mlDsaVkey],
    ] as const) {
      const bad = join(dir, `bad-signature-${line}.tlog-proof`);
      writeFileSync(bad, altered(proof, line));
      const refused = await run(['audit', 'verify', '--proof', bad, '--public-key', key, '--json']);
      expect(JSON.parse(refused.stdout), `line ${line}`).toMatchObject({ valid: false, code: 'bad_signature' });
      // the other key's verifier ignores a line it has no key for, as signed-note requires
      expect((await run(['audit', 'verify', '--proof', bad, '--public-key', key === vkey ? mlDsaVkey : vkey])).code).toBe(0);
    }
    // each refused by the check it defeats: the signature, the path to the root, the event's bytes
    for (const [line, codes] of [
      [3, ['root_mismatch']],
      [1, ['root_mismatch', 'invalid_proof']],
    ] as const) {
      const bad = join(dir, `bad-${line}.tlog-proof`);
      writeFileSync(bad, altered(proof, line));
      const refused = await run(['audit', 'verify', '--proof', bad, '--public-key', vkey, '--json']);
      expect(refused.code, `line ${line}`).toBe(1);
      const report = JSON.parse(refused.stdout) as { valid: boolean; code: string };
      expect(report.valid).toBe(false);
      expect(codes as readonly string[], `line ${line}: ${refused.stdout}`).toContain(report.code);
    }
    expect((await run(['audit', 'verify', '--proof', join(dir, 'missing'), '--public-key', vkey])).code).toBe(2);

    // pinned by a C2SP tlog-policy instead: the log alone passes; a witness the policy requires, never there, does not
    const policy = join(dir, 'trust.policy');
    writeFileSync(policy, `log ${vkey}\nquorum none\n`);
    expect((await run(['audit', 'verify', '--proof', file, '--policy', policy])).stdout).toContain('VALID');
    writeFileSync(policy, `log ${vkey}\nwitness w ${formatCosignerKey('witness.example', generateSigningKey().publicKey)}\nquorum w\n`);
    const unwitnessed = await run(['audit', 'verify', '--proof', file, '--policy', policy, '--json']);
    expect(unwitnessed.code).toBe(1);
    expect(JSON.parse(unwitnessed.stdout)).toMatchObject({ valid: false, code: 'unwitnessed' });
    expect((await run(['audit', 'verify', '--proof', file, '--policy', policy, '--public-key', vkey])).code).toBe(2);
  });

  it('the SDK makes and verifies the same file, and refuses another key or another event', async () => {
    const warden = createWarden({ apiKey: server.key, baseUrl: server.url });
    const proven = await warden.audit.prove(eventId, { publicKey: vkey });
    const proof = formatTlogProof(proven);
    const again = await verifyTlogProof(proof, { publicKey: vkey });
    expect(again).toMatchObject({ eventId, leafIndex: proven.leafIndex, leaf: proven.leaf });
    expect(again.checkpoint.rootHash).toEqual(proven.checkpoint.rootHash);
    // another key of the same name: its signature line is not in the note
    const otherKey = noteSigner(generateSigningKey(), vkey.slice(0, vkey.indexOf('+'))).vkey;
    await expect(verifyTlogProof(proof, { publicKey: otherKey })).rejects.toMatchObject({ code: 'unknown_key' });
    // the bytes of another event, at this index, do not reach the root
    const other = proven.leaf.replace(eventId, '00000000-0000-0000-0000-000000000000');
    await expect(verifyTlogProof(proof, { publicKey: vkey, leaf: other })).rejects.toMatchObject({ code: 'root_mismatch' });
  });
});
