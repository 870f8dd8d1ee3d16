import { CompiledQuery, type Kysely, type Selectable } from 'kysely';
import type { AuditSigningRefusals, DB } from '../../db/schema.ts';
import { subscribedSql } from '../events/outbox.repository.ts';

export type SigningRefusalRow = Selectable<AuditSigningRefusals>;

/**
 * Records that the signer refused a workspace's tree head. The first refusal (no row yet) also
 * writes its `audit.integrity_failed` outbox event, in the same statement; later ones update
 * the head and reason. Returns whether this refusal is new.
 */
export async function recordSigningRefusal(
  db: Kysely<DB>,
  refusal: Omit<SigningRefusalRow, 'detected_at'>,
  eventData: (detectedAt: string) => unknown,
): Promise<boolean> {
  const detectedAt = new Date();
  const { rows } = await db.executeQuery<{ inserted: boolean }>(
    CompiledQuery.raw(
      'WITH stored AS (INSERT INTO audit_signing_refusals (workspace_id, detected_at, signed_size, signed_root, head_size, head_root, reason) ' +
        'VALUES ($1::uuid, $2, $3, $4, $5, $6, $7) ON CONFLICT (workspace_id) DO UPDATE SET ' +
        'signed_size = EXCLUDED.signed_size, signed_root = EXCLUDED.signed_root, head_size = EXCLUDED.head_size, ' +
        'head_root = EXCLUDED.head_root, reason = EXCLUDED.reason RETURNING workspace_id, (xmax = 0) AS inserted), ' +
        "outbox AS (INSERT INTO outbox_events (workspace_id, id, type, data) SELECT workspace_id, gen_random_uuid(), 'audit.integrity_failed', $8::jsonb " +
        `FROM stored WHERE stored.inserted AND ${subscribedSql('stored.workspace_id', "'audit.integrity_failed'")}) ` +
        'SELECT inserted FROM stored',
      [
        refusal.workspace_id,
        detectedAt,
        refusal.signed_size,
        refusal.signed_root,
        refusal.head_size,
        refusal.head_root,
        refusal.reason,
        JSON.stringify(eventData(detectedAt.toISOString())),
      ],
    ),
  );
  return rows[0]?.inserted === true;
}

/** The head extends the signed checkpoint again (the database was restored): the refusal is over. */
export const clearSigningRefusal = (db: Kysely<DB>, workspaceId: string) =>
  db.deleteFrom('audit_signing_refusals').where('workspace_id', '=', workspaceId).execute();

export const findSigningRefusal = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('audit_signing_refusals').selectAll().where('workspace_id', '=', workspaceId).executeTakeFirst();
