/**
 * C2SP tlog-policy in the SDK: the format read as its text says (logs, witnesses, groups with
 * all/any/k, one quorum, names defined before use, keys not listed twice, no control
 * characters), the quorum evaluated over nested groups, and checkpoints verified under a
 * policy: signed by a listed log, cosigned as the quorum asks — with cosignatures made here, by
 * witness keys of the test's own.
 */
import { describe, expect, it } from 'vitest';
import { generateSigningKey, noteSigner, signCheckpoint } from '../../apps/server/src/features/audit/checkpoint.ts';
import { cosignatureLine, formatCosignerKey } from '../../apps/server/src/features/audit/cosignature.ts';
import { parseTlogPolicy, quorumMet, verifyCheckpointWithPolicy } from '../../packages/sdk/src/index.ts';

const ORIGIN = 'warden/audit/00000000-0000-0000-0000-000000000001';
const log = generateSigningKey();
const logSigner = noteSigner(log, ORIGIN);
const witnesses = ['x1', 'x2', 'x3', 'y1', 'y2'].map((name) => {
  const key = generateSigningKey();
  return { name, key, vkey: formatCosignerKey(`${name}.example`, key.publicKey) };
});
const vkeyOf = (name: string) => witnesses.find((w) => w.name === name)?.vkey as string;

const POLICY = [
  '# two organisations',
  `log ${logSigner.vkey} https://warden.example/api/v1/audit/log`,
  ...witnesses.map((w) => `\twitness ${w.name} ${w.vkey}`),
  'group X 2 x1 x2 x3',
  'group Y any y1 y2',
  'group X-and-Y all X Y',
  'quorum X-and-Y',
  '',
].join('\n');

/** A checkpoint note of the log, cosigned by the named witnesses. */
function checkpoint(cosigners: string[]): string {
  const note = signCheckpoint({ origin: ORIGIN, size: 7, rootHash: Buffer.alloc(32, 7), time: new Date() }, logSigner);
  const text = note.slice(0, note.indexOf('\n\n') + 1);
  const lines = cosigners.map((name) => {
    const w = witnesses.find((x) => x.name === name)!;
    return cosignatureLine(w.key, `${name}.example`, text, new Date());
  });
  return `${note}${lines.join('')}`;
}

describe('tlog-policy', () => {
  it('reads the format and evaluates the quorum over nested groups', () => {
    const policy = parseTlogPolicy(POLICY);
    expect(policy.logs).toEqual([logSigner.vkey]);
    expect([...policy.witnesses.keys()]).toEqual(['x1', 'x2', 'x3', 'y1', 'y2']);
    const met = (names: string[]) => quorumMet(policy, new Set(names.map(vkeyOf)));
    expect(met(['x1', 'x2', 'y2'])).toBe(true);
    expect(met(['x1', 'x2', 'x3'])).toBe(false);
    expect(met(['x1', 'y1', 'y2'])).toBe(false);
    expect(quorumMet(parseTlogPolicy(`log ${logSigner.vkey}\nquorum none\n`), new Set())).toBe(true);
  });

  it('refuses what the format forbids, naming the line', () => {
    const base = `log ${logSigner.vkey}\nwitness x1 ${vkeyOf('x1')}\n`;
    const cases: [string, RegExp][] = [
      [`${base}quorum y9\n`, /line 3: 'y9' is not defined/],
      [`${base}group G 2 x1\nquorum G\n`, /line 3: the threshold/],
      [`${base}group G any x1 x1\nquorum G\n`, /line 3: a member listed twice/],
      [`${base}witness x2 ${vkeyOf('x1').replace('x1.example', 'other.example')}\nquorum x1\n`, /line 3: a key listed twice/],
      [`${base}witness none ${vkeyOf('x2')}\nquorum x1\n`, /line 3: the name 'none' is taken/],
      [`${base}quorum x1\nquorum x1\n`, /line 4: a second quorum/],
      [base, /no quorum line/],
      [`${base}quorum x1\u0007\n`, /line 3: a control character/],
      [`${base}trust x1\nquorum x1\n`, /line 3: 'trust' is not/],
      [`log ${vkeyOf('x1')}\nquorum none\n`, /line 1: the vkey is not an Ed25519 note key \(0x01\) or ML-DSA-44/],
      // the log's own key as a witness: a log may not cosign itself
      [
        `log ${logSigner.vkey}\nwitness self ${formatCosignerKey(ORIGIN, log.publicKey)}\nquorum self\n`,
        /line 2: a witness key named as a log/,
      ],
      // whitespace is space and tab only
      [`${base}\u00a0quorum x1\n`, /line 3: '\u00a0quorum' is not/],
    ];
    for (const [text, error] of cases) expect(() => parseTlogPolicy(text), text).toThrow(error);
  });

  it('verifies a checkpoint signed by a listed log and cosigned as the quorum asks', async () => {
    const verified = await verifyCheckpointWithPolicy(checkpoint(['x1', 'x3', 'y1']), POLICY);
    expect(verified.cosignatures.map((c) => c.name).sort()).toEqual(['x1.example', 'x3.example', 'y1.example']);
    await expect(verifyCheckpointWithPolicy(checkpoint(['x1', 'y1']), POLICY)).rejects.toMatchObject({ code: 'unwitnessed' });
    await expect(verifyCheckpointWithPolicy(checkpoint(['x1', 'x2', 'x3']), POLICY)).rejects.toMatchObject({ code: 'unwitnessed' });
    const otherLog = noteSigner(generateSigningKey(), ORIGIN).vkey;
    await expect(verifyCheckpointWithPolicy(checkpoint([]), `log ${otherLog}\nquorum none\n`)).rejects.toMatchObject({
      code: 'unknown_key',
    });
  });
});
