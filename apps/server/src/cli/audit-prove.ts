/**
 * `warden audit prove EVENT_ID` and `warden audit verify --proof FILE`: an event's inclusion in the
 * log as a C2SP tlog-proof file (packages/sdk/src/audit-tlog-proof.ts), made from a running
 * Warden with the pinned key (the SDK's `prove`: nothing is written unless it verified), and
 * verified offline with that key alone (and a witness policy). The proof carries the event's
 * canonical bytes, so it proves the event, not only a hash.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { createWarden, formatTlogProof, isAuditProofError, verifyTlogProof } from '../../../../packages/sdk/src/index.ts';
import { UsageError } from './cli-errors.ts';
import { readPolicy, readVerifierKey, readWitnessKeys } from './trust-options.ts';

interface ProofOptions {
  url?: string | undefined;
  out?: string | undefined;
  proof?: string | undefined;
  'public-key'?: string | undefined;
  witness?: string[] | undefined;
  'witness-quorum'?: string | undefined;
  policy?: string | undefined;
}

/** The pinned keys: a tlog-policy (`--policy`), or the log's (`--public-key`), its witnesses' and how many must have cosigned. */
function pinned(values: ProofOptions) {
  if (values.policy !== undefined) {
    if (values['public-key'] || values.witness || values['witness-quorum'])
      throw new UsageError('--policy names the keys: give it instead of --public-key, --witness and --witness-quorum');
    return { policy: readPolicy(values.policy) };
  }
  if (!values['public-key'])
    throw new UsageError('--public-key KEY|FILE (GET /audit/signing-key verifier_key) or --policy FILE is required');
  const witnesses = readWitnessKeys(values.witness ?? []);
  const quorum = values['witness-quorum'] === undefined ? undefined : Number(values['witness-quorum']);
  if (quorum !== undefined && (!Number.isSafeInteger(quorum) || quorum < 1 || quorum > witnesses.length))
    throw new UsageError('--witness-quorum K: between 1 and the number of --witness keys');
  return {
    publicKey: readVerifierKey(values['public-key']),
    ...(witnesses.length > 0 ? { witnesses } : {}),
    ...(quorum ? { quorum } : {}),
  };
}

export async function auditProve(eventId: string | undefined, values: ProofOptions, json: boolean) {
  if (!eventId) throw new UsageError('audit prove needs the id of an event');
  if (!values.url) throw new UsageError('audit prove needs --url, the API of a running Warden (http://host:8080/api/v1)');
  const apiKey = process.env.WARDEN_API_KEY;
  if (!apiKey) throw new UsageError('audit prove reads the API key from WARDEN_API_KEY');
  const warden = createWarden({ apiKey, baseUrl: values.url.replace(/\/+$/, '') });
  try {
    const proven = await warden.audit.prove(eventId, pinned(values));
    const proof = formatTlogProof(proven);
    if (values.out) writeFileSync(values.out, proof);
    else process.stdout.write(proof);
    const summary = { event_id: eventId, index: proven.leafIndex, tree_size: proven.checkpoint.size, origin: proven.checkpoint.origin };
    if (values.out)
      console.error(
        json
          ? JSON.stringify(summary)
          : `proved ${eventId}: entry ${proven.leafIndex} of ${summary.origin} (${summary.tree_size} events) → ${values.out}`,
      );
    return 0;
  } catch (error) {
    if (!isAuditProofError(error)) throw error;
    console.error(
      json ? JSON.stringify({ valid: false, code: error.code, message: error.message }) : `NOT PROVED (${error.code}): ${error.message}`,
    );
    return 1;
  }
}

/** Verifies a tlog-proof file offline: exit 0 valid, 1 not. */
export async function auditVerifyProof(values: ProofOptions, json: boolean): Promise<number> {
  const file = values.proof as string;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    throw new UsageError(`--proof: no file ${file}`);
  }
  try {
    const proven = await verifyTlogProof(text, pinned(values));
    const report = {
      valid: true,
      event_id: proven.eventId,
      index: proven.leafIndex,
      origin: proven.checkpoint.origin,
      tree_size: proven.checkpoint.size,
      cosigned_by: proven.checkpoint.cosignatures.map((c) => c.name),
    };
    console.log(
      json
        ? JSON.stringify(report)
        : `VALID: event ${report.event_id} is entry ${report.index} of ${report.origin}, in its signed checkpoint of ${report.tree_size} events` +
            (report.cosigned_by.length > 0 ? `, cosigned by ${report.cosigned_by.join(', ')}` : ''),
    );
    return 0;
  } catch (error) {
    if (!isAuditProofError(error)) throw error;
    console.log(
      json ? JSON.stringify({ valid: false, code: error.code, message: error.message }) : `INVALID (${error.code}): ${error.message}`,
    );
    return 1;
  }
}
