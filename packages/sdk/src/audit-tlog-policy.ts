/**
 * C2SP `tlog-policy`: which logs and witnesses a verifier trusts, and how many of the witnesses
 * (a quorum over nested groups) must have cosigned a checkpoint. Read once, used by every
 * verifier in place of separate key and witness options: `verifyTlogProof(proof, { policy })`,
 * `prove(id, { policy })`, and the CLI's `--policy FILE`.
 *
 *     log warden/audit/<workspace>+1a2b3c4d+AQ…
 *     witness w1 witness-1.example+…+Bg…   (ML-DSA-44, type 0x06)
 *     witness w2 witness-2.example+…+BA…   (Ed25519, type 0x04)
 *     group both all w1 w2
 *     quorum both
 */
import { type VerifiedCheckpoint, type VerifyCheckpointOptions, verifyCheckpoint } from './audit-checkpoints.js';
import { AuditProofError } from './audit-errors.js';
import { COSIGNATURE_V1, ED25519, ML_DSA_44, parseVerifierKeyText, type SignatureType } from './audit-format.js';

/** A log signs with Ed25519 or ML-DSA-44; a witness cosigns with Ed25519 cosignature/v1 or ML-DSA-44. */
const LOG_TYPES = [ED25519, ML_DSA_44] as const;
const WITNESS_TYPES = [COSIGNATURE_V1, ML_DSA_44] as const;

/** A member of the quorum: a witness (by its key) or a group of members, at least `threshold` of which must have witnessed. */
type Rule = { witness: string } | { threshold: number; members: Rule[] } | { none: true };

export interface TlogPolicy {
  /** The logs' vkeys: a checkpoint signed by any one of them. */
  logs: string[];
  /** The witnesses' vkeys, by their names in the policy. */
  witnesses: Map<string, string>;
  /** What a checkpoint's cosignatures must satisfy. */
  quorum: Rule;
}

/** The implementation limits the format recommends supporting, and this one enforces. */
const LIMITS = { logs: 32, witnesses: 32, groups: 32 };

const invalid = (line: number, why: string) => new AuditProofError('invalid_argument', `tlog-policy line ${line}: ${why}`);

/** The public key a vkey wraps: two vkeys of one key are the same key, whatever their names, ids or types (a log is no witness of itself). */
function wrappedKey(vkey: string, types: readonly SignatureType[], line: number): string {
  try {
    const { publicKey } = parseVerifierKeyText(vkey, types);
    return Array.from(publicKey).join(',');
  } catch (error) {
    throw invalid(line, (error as Error).message);
  }
}

/** Parses a policy file; throws AuditProofError (`invalid_argument`) naming the line that is wrong. */
export function parseTlogPolicy(text: string): TlogPolicy {
  // tab, newline, printable ASCII, and any non-ASCII (opaque); nothing else
  const bad = [...text].findIndex((c) => c !== '\t' && c !== '\n' && (c < ' ' || c === '\u007f'));
  if (bad >= 0) throw invalid([...text].slice(0, bad).join('').split('\n').length, 'a control character');
  const logs: string[] = [];
  const witnesses = new Map<string, string>();
  const rules = new Map<string, Rule>();
  const keys = new Set<string>();
  let quorum: Rule | undefined;
  let groups = 0;
  text.split('\n').forEach((raw, at) => {
    const line = at + 1;
    // whitespace is ASCII space and tab only: any other character is part of a word
    const words = raw.replace(/^[ \t]+|[ \t]+$/g, '').split(/[ \t]+/);
    if (words[0] === '' || words[0]?.startsWith('#')) return;
    const [keyword, ...rest] = words;
    const defined = (name: string) => {
      if (name === 'none' || rules.has(name)) throw invalid(line, `the name '${name}' is taken`);
    };
    const known = (name: string) => {
      const rule = rules.get(name);
      if (!rule) throw invalid(line, `'${name}' is not defined on a line before`);
      return rule;
    };
    switch (keyword) {
      case 'log': {
        if (rest.length < 1 || rest.length > 2) throw invalid(line, 'log <vkey> [<url>]');
        const key = wrappedKey(rest[0] as string, LOG_TYPES, line);
        if (keys.has(key)) throw invalid(line, 'a key listed twice');
        keys.add(key);
        logs.push(rest[0] as string);
        if (logs.length > LIMITS.logs) throw invalid(line, `more than ${LIMITS.logs} logs`);
        return;
      }
      case 'witness': {
        if (rest.length < 2 || rest.length > 3) throw invalid(line, 'witness <name> <vkey> [<url>]');
        const [name, vkey] = rest as [string, string];
        defined(name);
        const key = wrappedKey(vkey, WITNESS_TYPES, line);
        if (logs.some((log) => log.split('+')[0] === vkey.split('+')[0]))
          throw invalid(line, 'a witness key named as a log: the log cannot witness itself');
        if (keys.has(key)) throw invalid(line, 'a key listed twice');
        keys.add(key);
        witnesses.set(name, vkey);
        rules.set(name, { witness: vkey });
        if (witnesses.size > LIMITS.witnesses) throw invalid(line, `more than ${LIMITS.witnesses} witnesses`);
        return;
      }
      case 'group': {
        const [name, threshold, ...members] = rest;
        if (!name || !threshold || members.length === 0) throw invalid(line, 'group <name> all|any|<k> <name>...');
        defined(name);
        if (new Set(members).size !== members.length) throw invalid(line, 'a member listed twice');
        const k = threshold === 'all' ? members.length : threshold === 'any' ? 1 : /^[1-9]\d*$/.test(threshold) ? Number(threshold) : 0;
        if (k < 1 || k > members.length) throw invalid(line, `the threshold is all, any, or 1 to ${members.length}`);
        rules.set(name, { threshold: k, members: members.map(known) });
        if (++groups > LIMITS.groups) throw invalid(line, `more than ${LIMITS.groups} groups`);
        return;
      }
      case 'quorum': {
        if (rest.length !== 1) throw invalid(line, 'quorum <name>');
        if (quorum) throw invalid(line, 'a second quorum');
        quorum = rest[0] === 'none' ? { none: true } : known(rest[0] as string);
        return;
      }
      default:
        throw invalid(line, `'${keyword}' is not log, witness, group or quorum`);
    }
  });
  if (!quorum) throw new AuditProofError('invalid_argument', 'tlog-policy: no quorum line');
  return { logs, witnesses, quorum };
}

/** Whether the witnesses that cosigned (their vkeys) satisfy the rule. */
function satisfied(rule: Rule, cosigned: ReadonlySet<string>): boolean {
  if ('none' in rule) return true;
  if ('witness' in rule) return cosigned.has(rule.witness);
  return rule.members.filter((member) => satisfied(member, cosigned)).length >= rule.threshold;
}

/** Whether the witnesses whose cosignatures verified (their vkeys, as the policy gives them) meet the policy's quorum. */
export const quorumMet = (policy: TlogPolicy, cosigned: ReadonlySet<string>): boolean => satisfied(policy.quorum, cosigned);

/** A policy given as text or parsed. */
export const policyOf = (policy: string | TlogPolicy): TlogPolicy => (typeof policy === 'string' ? parseTlogPolicy(policy) : policy);

/**
 * Verifies a checkpoint note under a policy: signed by one of its logs (the key's name being the
 * checkpoint's origin, as the format asks), and cosigned so that the quorum is met.
 */
export async function verifyCheckpointWithPolicy(
  note: string,
  policy: string | TlogPolicy,
  options: Pick<VerifyCheckpointOptions, 'origin'> = {},
): Promise<VerifiedCheckpoint> {
  const { logs, witnesses, quorum } = policyOf(policy);
  if (logs.length === 0) throw new AuditProofError('invalid_argument', 'tlog-policy: no log line (Warden verifies a given log)');
  const vkeys = [...witnesses.values()];
  const checkpoint = await verifyCheckpoint(note, logs, { ...options, witnesses: vkeys, quorum: 0 });
  if (checkpoint.origin !== checkpoint.keyName)
    throw new AuditProofError(
      'origin_mismatch',
      `the checkpoint of ${JSON.stringify(checkpoint.origin)} is signed by the key of ${checkpoint.keyName}`,
    );
  // the cosignatures that verified, as the policy names their keys
  const cosigned = new Set(
    vkeys.filter((vkey) => {
      const { name, keyId } = parseVerifierKeyText(vkey, WITNESS_TYPES);
      return checkpoint.cosignatures.some((c) => c.name === name && c.keyId === keyId);
    }),
  );
  if (!satisfied(quorum, cosigned))
    throw new AuditProofError('unwitnessed', `the checkpoint's ${cosigned.size} verified cosignatures do not meet the policy's quorum`);
  return checkpoint;
}
