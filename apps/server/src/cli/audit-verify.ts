/**
 * `warden audit verify`: checks an export against signed checkpoints with the log's public key
 * alone, and with a witness policy (--witness, --witness-quorum) requires each checkpoint to
 * carry enough witness cosignatures. No database, no server.
 */
import { createReadStream, existsSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { type ExportLine, notesIn, type OfflineReport, OfflineVerifier } from '../features/audit/offline-verify.ts';
import { isObject } from '../shared/objects.ts';
import { UsageError } from './cli-errors.ts';
import { exportPolicy, readVerifierKey, readWitnessPolicy } from './trust-options.ts';

/** The lines of a file, one at a time. */
function linesOf(file: string) {
  return createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Number.POSITIVE_INFINITY });
}

/** An export line, checked for the fields the verifier reads; a reason when it is not one. */
function exportLine(text: string): ExportLine | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  if (!isObject(parsed)) return 'not an export line';
  const value = parsed;
  const isCount = (name: string) => Number.isSafeInteger(value[name]) && (value[name] as number) >= 0;
  const isText = (name: string) => typeof value[name] === 'string';
  switch (value.type) {
    case 'log':
      return isText('origin') && isText('workspace_id') && isCount('tree_size')
        ? (value as ExportLine)
        : 'a log header without origin, workspace_id or tree_size';
    case 'event':
      return isCount('index') && isText('event_id') && isText('leaf_hash') && (value.leaf === null || isText('leaf'))
        ? (value as ExportLine)
        : 'an event without index, event_id, leaf or leaf_hash';
    case 'checkpoint':
      return isText('note') ? (value as ExportLine) : 'a checkpoint without its note';
    default:
      return `an unknown line type ${JSON.stringify(value.type)}`;
  }
}

/** How the exporter writes each line's start: the two passes parse only the lines they need. */
const EVENT_PREFIX = '{"type":"event"';
const OTHER_PREFIXES = ['{"type":"log"', '{"type":"checkpoint"'];

export async function auditVerify(
  values: {
    export?: string | undefined;
    checkpoint?: string[] | undefined;
    'public-key'?: string | undefined;
    witness?: string[] | undefined;
    'witness-quorum'?: string | undefined;
    proof?: string | undefined;
    policy?: string | undefined;
  },
  json: boolean,
): Promise<number> {
  if (values.proof !== undefined) {
    if (values.export !== undefined) throw new UsageError('audit verify takes --export FILE or --proof FILE, not both');
    return (await import('./audit-prove.ts')).auditVerifyProof(values, json);
  }
  if (values.policy !== undefined && (values['public-key'] || values.witness || values['witness-quorum']))
    throw new UsageError('--policy names the keys: give it instead of --public-key, --witness and --witness-quorum');
  if (!values.export || !(values['public-key'] || values.policy))
    throw new UsageError('audit verify needs --export FILE (or --proof FILE) and --public-key KEY (or --policy FILE)');
  const pinned = values.policy ? exportPolicy(values.policy) : undefined;
  const verifier = pinned
    ? new OfflineVerifier(pinned.log, pinned.witnesses)
    : new OfflineVerifier(readVerifierKey(values['public-key'] as string), readWitnessPolicy(values));
  if (!existsSync(values.export)) throw new UsageError(`--export: no file ${values.export}`);
  const outside = (values.checkpoint ?? []).flatMap((file) => {
    if (!existsSync(file)) throw new UsageError(`--checkpoint: no file ${file}`);
    try {
      return notesIn(readFileSync(file, 'utf8'));
    } catch (error) {
      throw new UsageError(`--checkpoint ${file}: ${(error as Error).message}`);
    }
  });

  // First pass: the header and the checkpoints, which the events are compared with as they come.
  let number = 0;
  for await (const text of linesOf(values.export)) {
    number++;
    if (text.trim() === '' || text.startsWith(EVENT_PREFIX)) continue;
    const line = exportLine(text);
    if (typeof line === 'string') verifier.malformed(number, line);
    else if (line.type === 'log') verifier.header(line);
    else if (line.type === 'checkpoint') verifier.checkpoint(line.note, 'export');
  }
  for (const note of outside) verifier.checkpoint(note, 'outside');
  // Second pass: the events, in order.
  number = 0;
  for await (const text of linesOf(values.export)) {
    number++;
    if (text.trim() === '' || OTHER_PREFIXES.some((prefix) => text.startsWith(prefix))) continue;
    const line = exportLine(text);
    if (typeof line === 'string') {
      if (text.startsWith(EVENT_PREFIX)) verifier.malformed(number, line); // others were reported by the first pass
    } else if (line.type === 'event') verifier.event(line);
  }

  const report = verifier.finish();
  if (json) console.log(JSON.stringify(report));
  else printReport(report);
  return report.valid ? 0 : 1;
}

function printReport(report: OfflineReport): void {
  console.log(`log ${report.origin}`);
  const claimed = report.tree_size !== null && report.tree_size !== report.events ? ` (its header claims ${report.tree_size})` : '';
  console.log(`events: ${report.events}${claimed}, root ${report.root_hash}`);
  const skipped = report.other_logs > 0 ? `; ${report.other_logs} of other logs skipped` : '';
  console.log(`checkpoints: ${report.checkpoints} verified, ${report.checkpoints_outside} of them given from outside the export${skipped}`);
  if (report.witness_policy)
    console.log(
      `witness policy: ${report.witness_policy.quorum} of ${report.witness_policy.witnesses.length}; ${report.checkpoints_unwitnessed} checkpoints short of it not trusted`,
    );
  for (const warning of report.warnings) console.log(`warning: ${warning}`);
  if (report.valid) {
    console.log(`VALID: every event hashes to its leaf and the tree makes every signed checkpoint, up to size ${report.verified_size}`);
    if (report.events > report.verified_size) {
      console.log(`(events from index ${report.verified_size} on are not yet covered by a checkpoint you hold)`);
    }
    return;
  }
  const count = report.problems.length + report.problems_omitted;
  console.log(`INVALID: ${count} problem${count === 1 ? '' : 's'}, first bad index ${report.first_bad_index ?? 'none'}`);
  for (const problem of report.problems) {
    const range =
      problem.last_index !== null && problem.last_index !== problem.index ? `${problem.index}..${problem.last_index}` : `${problem.index}`;
    console.log(`  ${problem.index === null ? '-' : `index ${range}`}: ${problem.kind}: ${problem.message}`);
  }
  if (report.problems_omitted > 0) console.log(`  … and ${report.problems_omitted} more`);
}
