/**
 * What a verifying command trusts, as its options name it: the log's verifier key
 * (`--public-key`, the key or a file holding it), witness keys and a quorum (`--witness`,
 * `--witness-quorum`), or all of it as a C2SP tlog-policy file (`--policy`). Wrong input is a
 * usage error naming the option.
 */
import { existsSync, readFileSync } from 'node:fs';
import { isAuditProofError, parseTlogPolicy, quorumMet, type TlogPolicy } from '../../../../packages/sdk/src/index.ts';
import { AuditProofError, parseVerifierKey } from '../features/audit/checkpoint.ts';
import { type WitnessPolicy, witnessPolicy } from '../features/audit/cosignature.ts';
import { UsageError } from './cli-errors.ts';

/** The verifier key: given as is, or read from a file (the key alone, or GET /audit/signing-key's JSON). */
export function readVerifierKey(value: string): string {
  let key = value.trim();
  if (!/^[^+\s]+\+[0-9a-f]{8}\+/.test(key)) {
    if (!existsSync(value)) throw new UsageError(`--public-key: neither a verifier key nor a file: ${value}`);
    key = readFileSync(value, 'utf8').trim();
    if (key.startsWith('{')) {
      try {
        const parsed = JSON.parse(key) as { verifier_key?: unknown; data?: { verifier_key?: unknown } };
        key = String(parsed.verifier_key ?? parsed.data?.verifier_key ?? '');
      } catch {
        throw new UsageError(`--public-key: ${value} is neither a verifier key nor JSON`);
      }
    }
  }
  try {
    parseVerifierKey(key);
  } catch (error) {
    if (error instanceof AuditProofError) throw new UsageError(`--public-key: ${error.message}`);
    throw error;
  }
  return key;
}

/** A C2SP tlog-policy file, parsed (a usage error names what is wrong). */
export function readPolicy(file: string): TlogPolicy {
  if (!existsSync(file)) throw new UsageError(`--policy: no file ${file}`);
  try {
    const policy = parseTlogPolicy(readFileSync(file, 'utf8'));
    // every key whole (its id is its name's and key's), and no two witnesses one signer: before anything is verified with them
    for (const log of policy.logs) parseVerifierKey(log);
    witnessPolicy([...policy.witnesses.values()], 0);
    return policy;
  } catch (error) {
    if (isAuditProofError(error)) throw new UsageError(`--policy ${file}: ${error.message}`);
    throw error;
  }
}

/** --witness VKEY values, each checked (a usage error names the one that is wrong). */
export function readWitnessKeys(vkeys: readonly string[]): string[] {
  try {
    witnessPolicy(vkeys, 0);
    return [...vkeys];
  } catch (error) {
    if (error instanceof AuditProofError) throw new UsageError(`--witness: ${error.message}`);
    throw error;
  }
}

/** An export is one log's: the policy's one log, and its witnesses with its quorum over groups. */
export function exportPolicy(file: string): { log: string; witnesses: WitnessPolicy } {
  const policy = readPolicy(file);
  if (policy.logs.length !== 1) throw new UsageError(`--policy ${file}: an export is one log's, so the policy names exactly one log`);
  const witnesses = witnessPolicy([...policy.witnesses.values()], 0);
  return {
    log: policy.logs[0] as string,
    witnesses: { ...witnesses, met: (cosigners) => quorumMet(policy, new Set(cosigners.map((c) => c.vkey))) },
  };
}

/** --witness VKEY (repeated) and --witness-quorum K (default: every witness given). */
export function readWitnessPolicy(values: {
  witness?: string[] | undefined;
  'witness-quorum'?: string | undefined;
}): WitnessPolicy | undefined {
  const vkeys = values.witness ?? [];
  if (vkeys.length === 0) {
    if (values['witness-quorum'] !== undefined) throw new UsageError('--witness-quorum needs --witness VKEY');
    return undefined;
  }
  const quorum = values['witness-quorum'] === undefined ? undefined : Number(values['witness-quorum']);
  try {
    return witnessPolicy(vkeys, quorum);
  } catch (error) {
    if (error instanceof AuditProofError) throw new UsageError(`--witness: ${error.message}`);
    throw error;
  }
}
