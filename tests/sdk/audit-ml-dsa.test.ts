/**
 * ML-DSA-44 in the audit log (issue 52): a checkpoint as Warden signs it (Ed25519 and ML-DSA-44
 * lines under the origin) cosigned by an ML-DSA-44 witness and an Ed25519 one, verified by the
 * SDK's verifyCheckpoint under Node and in Chromium (its Web Crypto has no ML-DSA: the SDK's
 * @noble/post-quantum does it), with each key alone; a flipped bit in either ML-DSA-44
 * signature, a time line the ML-DSA-44 signature does not state and an extension line it does
 * not cover are refused. The lines' layout is checked by the tests' own C2SP verifier
 * (tests/support/tlog-cosignature.ts), so the server and the SDK do not only agree with each other.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  exportSigningKey,
  generateSigningKey,
  noteSigner,
  signCheckpoint,
  signNote,
} from '../../apps/server/src/features/audit/checkpoint.ts';
import { loadAuditSigner } from '../../apps/server/src/features/audit/checkpointer.ts';
import { cosignatureLine, formatCosignerKey } from '../../apps/server/src/features/audit/cosignature.ts';
import { isAuditProofError, parseTlogPolicy, verifyCheckpoint } from '../../packages/sdk/src/index.ts';
import { cosignatureTime, noteKeyId, parseCosignerVkey } from '../support/tlog-cosignature.ts';

const ORIGIN = 'warden.example/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10';
const TIME = new Date('2026-12-03T12:00:00Z');
const ed = generateSigningKey();
const ml = generateSigningKey('ml-dsa-44');
const witnessMl = { name: 'witness.example/pq', key: generateSigningKey('ml-dsa-44') };
const witnessEd = { name: 'witness.example/ed', key: generateSigningKey() };
const edVkey = noteSigner(ed, ORIGIN).vkey;
const mlVkey = noteSigner(ml, ORIGIN).vkey;
const witnessMlVkey = formatCosignerKey(witnessMl.name, witnessMl.key.publicKey);
const witnessEdVkey = formatCosignerKey(witnessEd.name, witnessEd.key.publicKey);
/** The ML-DSA-44 witness's earlier Ed25519 key, still pinned while verifiers move. */
const witnessMlOldVkey = formatCosignerKey(witnessMl.name, generateSigningKey().publicKey);

/** A checkpoint signed by both log keys, then cosigned by both witnesses. */
function cosigned(extensions: string[] = []): string {
  const signed = signCheckpoint(
    { origin: ORIGIN, size: 10_000, rootHash: Buffer.alloc(32, 0xab), time: TIME, extensions },
    ...(extensions.length === 0 ? [noteSigner(ed, ORIGIN), noteSigner(ml, ORIGIN)] : [noteSigner(ed, ORIGIN)]),
  );
  const text = signed.slice(0, signed.lastIndexOf('\n\n') + 1);
  return (
    signed +
    cosignatureLine(witnessMl.key, witnessMl.name, text, new Date(TIME.getTime() + 5_000)) +
    cosignatureLine(witnessEd.key, witnessEd.name, text, new Date(TIME.getTime() + 7_000))
  );
}
const NOTE = cosigned();
const lineOf = (note: string, name: string, nth = 0) => note.split('\n').filter((l) => l.startsWith(`— ${name} `))[nth] as string;

/** The note with one bit flipped in the signature bytes (past key id and timestamp) of the given line. */
function flipped(note: string, line: string): string {
  const prefix = line.slice(0, line.lastIndexOf(' ') + 1);
  const bytes = Buffer.from(line.slice(prefix.length), 'base64');
  bytes[4 + 8 + 100] = (bytes[4 + 8 + 100] as number) ^ 0x01;
  return note.replace(line, `${prefix}${bytes.toString('base64')}`);
}

/** Every case, as [name, note, vkeys, options, expected code or 'ok'] — run under Node and in Chromium alike. */
const CASES: [string, string, string[], { witnesses?: string[]; quorum?: number }, string][] = [
  ['both keys, both witnesses', NOTE, [edVkey, mlVkey], { witnesses: [witnessMlVkey, witnessEdVkey] }, 'ok'],
  ['the ML-DSA-44 key alone, the ML-DSA-44 witness', NOTE, [mlVkey], { witnesses: [witnessMlVkey] }, 'ok'],
  ['the Ed25519 key alone ignores the ML-DSA-44 lines', NOTE, [edVkey], {}, 'ok'],
  ['a flipped bit in the log’s ML-DSA-44 signature', flipped(NOTE, lineOf(NOTE, ORIGIN, 1)), [mlVkey], {}, 'bad_signature'],
  [
    'a flipped bit in the witness’s ML-DSA-44 cosignature',
    flipped(NOTE, lineOf(NOTE, witnessMl.name)),
    [edVkey],
    { witnesses: [witnessMlVkey] },
    'bad_signature',
  ],
  ['a time line the ML-DSA-44 signature does not state', NOTE.replace(/\ntime \d+\n/, '\ntime 1\n'), [mlVkey], {}, 'bad_signature'],
  // a witness moving to ML-DSA-44 pinned by both its keys is one witness: its one cosignature meets a quorum of 1 (the default)
  ['one witness’s two keys count once', NOTE, [edVkey], { witnesses: [witnessMlVkey, witnessMlOldVkey] }, 'ok'],
  [
    'so a quorum of two is more than the one witness given',
    NOTE,
    [edVkey],
    { witnesses: [witnessMlVkey, witnessMlOldVkey], quorum: 2 },
    'invalid_argument',
  ],
  [
    'a witness that did not cosign',
    NOTE,
    [mlVkey],
    { witnesses: [formatCosignerKey('w.example/x', generateSigningKey('ml-dsa-44').publicKey)] },
    'unwitnessed',
  ],
];

async function outcome(note: string, vkeys: string[], options: { witnesses?: string[]; quorum?: number }) {
  try {
    const checkpoint = await verifyCheckpoint(note, vkeys, options);
    return {
      code: 'ok',
      size: checkpoint.size,
      time: checkpoint.time?.toISOString(),
      cosigners: checkpoint.cosignatures.map((c) => c.name),
    };
  } catch (error) {
    if (isAuditProofError(error)) return { code: error.code };
    throw error;
  }
}

describe('ML-DSA-44 checkpoints and cosignatures', () => {
  it('are laid out as C2SP says: type 0x06 key ids, timestamped subtree/v1 signatures that verify by the spec', () => {
    const log = parseCosignerVkey(mlVkey); // a 0x06 vkey reads the same for a log as for a witness
    expect(log.type).toBe(0x06);
    expect(noteKeyId(ORIGIN, 0x06, ml.publicKey).equals(log.id)).toBe(true);
    // the log's ML-DSA-44 line states the checkpoint's time; the witness's its own
    expect(cosignatureTime(NOTE, log)).toBe(BigInt(TIME.getTime() / 1000));
    expect(cosignatureTime(NOTE, parseCosignerVkey(witnessMlVkey))).toBe(BigInt(TIME.getTime() / 1000 + 5));
    expect(Buffer.from(lineOf(NOTE, ORIGIN, 1).split(' ')[2] as string, 'base64')).toHaveLength(4 + 8 + 2420);
  });

  it.each(CASES)('under Node: %s', async (_name, note, vkeys, options, expected) => {
    const result = await outcome(note, vkeys, options);
    expect(result.code).toBe(expected);
    if (expected === 'ok') expect(result).toMatchObject({ size: 10_000, time: TIME.toISOString() });
  });

  it('never counts the log’s own ML-DSA-44 line as a witness’s, however it is pinned', async () => {
    // its line reads like a subtree/v1 cosignature by a key named as the origin
    expect((await outcome(NOTE, [edVkey], { witnesses: [mlVkey.replace(/^([^+]+)\+[0-9a-f]{8}\+B/, '$1+00000000+B')] })).code).toBe(
      'invalid_argument',
    );
    const asWitness = parseCosignerVkey(mlVkey); // the log's 0x06 key, offered as a witness's
    expect(asWitness.name).toBe(ORIGIN);
    expect((await outcome(NOTE, [edVkey], { witnesses: [mlVkey], quorum: 1 })).code).toBe('invalid_argument');
    const policy = `log ${edVkey}\nwitness self ${mlVkey}\nquorum self\n`;
    expect(() => parseTlogPolicy(policy)).toThrow(/cannot witness itself/);
  });

  it('refuses a time line past what a date can hold as a proof error (no signature can be over it), never a crash', async () => {
    const line = lineOf(NOTE, ORIGIN, 1);
    const bytes = Buffer.from(line.split(' ')[2] as string, 'base64').fill(0, 4); // the key id kept, the rest zero
    const forged = NOTE.replace(/\ntime \d+\n/, '\ntime 9000000000000\n').replace(line, `— ${ORIGIN} ${bytes.toString('base64')}`);
    expect((await outcome(forged, [mlVkey], {})).code).toBe('bad_signature');
    // signed by the log's Ed25519 key, the same line is a checkpoint the format does not allow
    const text = `${ORIGIN}\n1\n${Buffer.alloc(32).toString('base64')}\ntime 9000000000000\n`;
    expect((await outcome(signNote(text, noteSigner(ed, ORIGIN)), [edVkey], {})).code).toBe('malformed_checkpoint');
  });

  it('refuses, with the ML-DSA-44 key alone, extension lines its signature does not cover', async () => {
    // were the log to add a line, only its Ed25519 signature would cover it: no ML-DSA-44 signer may vouch for it
    const withLine = signCheckpoint(
      { origin: ORIGIN, size: 1, rootHash: Buffer.alloc(32, 1), time: TIME },
      noteSigner(ed, ORIGIN),
      noteSigner(ml, ORIGIN),
    ).replace(/\ntime (\d+)\n/, '\ntime $1\nextra line\n');
    expect((await outcome(withLine, [mlVkey], {})).code).toBe('bad_signature');
    expect(() =>
      signCheckpoint({ origin: ORIGIN, size: 1, rootHash: Buffer.alloc(32, 1), extensions: ['x'] }, noteSigner(ml, ORIGIN)),
    ).toThrow(/extension lines/);
    expect((await outcome(cosigned(['x']), [edVkey], { witnesses: [witnessMlVkey] })).code).toBe('ok');
  });
});

describe('the log’s ML-DSA-44 key', () => {
  it('is made in the data directory with the Ed25519 one, and never per machine beside a configured Ed25519 key', () => {
    const dir = mkdtempSync(join(tmpdir(), 'warden-keys-'));
    try {
      const first = loadAuditSigner({ auditSigningKey: undefined, dataDir: dir, auditLogName: 'warden' });
      expect(first.mlDsaKey?.algorithm).toBe('ml-dsa-44');
      expect(existsSync(join(dir, 'audit-signing-ml-dsa-44.key'))).toBe(true);
      const again = loadAuditSigner({ auditSigningKey: undefined, dataDir: dir, auditLogName: 'warden' });
      expect(again.mlDsaKey?.publicKey.equals(first.mlDsaKey!.publicKey)).toBe(true);

      const shared = join(dir, 'replica');
      const configured = loadAuditSigner({ auditSigningKey: exportSigningKey(ed), dataDir: shared, auditLogName: 'warden' });
      expect(configured.mlDsaKey).toBeUndefined();
      expect(existsSync(join(shared, 'audit-signing-ml-dsa-44.key'))).toBe(false);
      const both = loadAuditSigner({
        auditSigningKey: exportSigningKey(ed),
        auditMlDsaSigningKey: exportSigningKey(ml),
        dataDir: shared,
        auditLogName: 'warden',
      });
      expect(both.mlDsaKey?.publicKey.equals(ml.publicKey)).toBe(true);
      // a key of the other algorithm where ML-DSA-44 is expected is refused
      expect(() =>
        loadAuditSigner({ auditSigningKey: undefined, auditMlDsaSigningKey: exportSigningKey(ed), dataDir: shared, auditLogName: 'w' }),
      ).toThrow(/ML-DSA-44/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const CHROMIUM = '/usr/bin/chromium';
const HAS_CHROMIUM = existsSync(CHROMIUM);

describe.skipIf(!HAS_CHROMIUM && process.env.CI !== 'true')('ML-DSA-44 in Chromium (the SDK bundled for the browser)', () => {
  let browser: Browser;
  let page: Server;
  let url: string;

  beforeAll(async () => {
    // the SDK's own entry, bundled as a browser would load it (esbuild, platform browser: no Node built-ins)
    const bundle = await build({
      entryPoints: [fileURLToPath(new URL('../../packages/sdk/src/index.ts', import.meta.url))],
      bundle: true,
      format: 'esm',
      platform: 'browser',
      write: false,
      logLevel: 'silent',
    });
    const script = bundle.outputFiles[0]!.text;
    // served from loopback: a secure context, as Web Crypto requires
    page = createServer((req, res) => {
      if (req.url === '/sdk.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
      else
        res
          .writeHead(200, { 'content-type': 'text/html' })
          .end('<!doctype html><title>sdk</title><script type="module">import * as sdk from "/sdk.js"; window.sdk = sdk;</script>');
    });
    await new Promise<void>((resolve) => page.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(page.address() as AddressInfo).port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'], headless: true });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => page?.close(resolve));
  });

  it('gives every case the answer Node gives', { timeout: 120_000 }, async () => {
    const tab = await browser.newPage();
    await tab.goto(`${url}/`);
    // Chromium's Web Crypto has no ML-DSA: what verifies below is the SDK's own code
    expect(
      await tab.evaluate(() =>
        crypto.subtle.importKey('raw', new Uint8Array(1312), 'ML-DSA-44', false, ['verify']).then(
          () => 'has',
          () => 'none',
        ),
      ),
    ).toBe('none');
    await tab.waitForFunction(() => 'sdk' in window, null, { timeout: 60_000 });
    const results = await tab.evaluate(
      async ({ cases }) => {
        const { verifyCheckpoint } = (window as unknown as { sdk: typeof import('../../packages/sdk/src/index.ts') }).sdk;
        const out: string[] = [];
        for (const [, note, vkeys, options] of cases) {
          try {
            const checkpoint = await verifyCheckpoint(note, vkeys, options);
            out.push(`ok ${checkpoint.size} ${checkpoint.time?.toISOString()}`);
          } catch (error) {
            out.push((error as { code?: string }).code ?? String(error));
          }
        }
        return out;
      },
      { cases: CASES },
    );
    expect(results).toEqual(CASES.map(([, , , , expected]) => (expected === 'ok' ? `ok 10000 ${TIME.toISOString()}` : expected)));
  });
});
