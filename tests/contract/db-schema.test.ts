/**
 * apps/server/src/db/schema.ts is generated from the migrations (tools/db-schema.ts, part of
 * `npm run generate`, whose output CI requires to be committed). The committed file is what the
 * migrations build, generated in any locale; and a migration whose types were not regenerated
 * fails the check, which names each table and column that differs.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { checkDbSchema, SCHEMA_FILE } from '../../tools/db-schema.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MIGRATIONS = fileURLToPath(new URL('../../apps/server/src/db/migrations/', import.meta.url));
// Each check starts a PGlite and runs every migration: seconds, more on a busy machine.
const GENERATION_TIMEOUT = 120_000;

it('the committed schema.ts is what the migrations build, whatever the locale', { timeout: GENERATION_TIMEOUT }, () => {
  // Under cs_CZ, `ch` sorts after `h`: kysely-codegen's order would change without the pin.
  const check = spawnSync('npx', ['tsx', 'tools/db-schema.ts', '--check'], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: GENERATION_TIMEOUT - 10_000,
    env: { ...process.env, LC_ALL: 'cs_CZ.UTF-8' },
  });
  expect(check.status, `${check.stdout}\n${check.stderr}`).toBe(0);
});

it('a migration without its regenerated types fails the check, naming the table and the column', {
  timeout: GENERATION_TIMEOUT,
}, async () => {
  const copy = mkdtempSync(join(tmpdir(), 'warden-migrations-'));
  try {
    cpSync(MIGRATIONS, copy, { recursive: true });
    writeFileSync(
      join(copy, '9999_drift.sql'),
      [
        'ALTER TABLE agents ADD COLUMN nickname text;',
        'ALTER TABLE policies ALTER COLUMN description SET NOT NULL;',
        'ALTER TABLE mcp_servers DROP COLUMN description;',
        'CREATE TABLE agent_notes (workspace_id uuid NOT NULL, note text NOT NULL);',
      ].join('\n'),
    );
    expect(await checkDbSchema({ migrationsDir: copy })).toEqual([
      `table agent_notes: built by the migrations, missing from ${SCHEMA_FILE}`,
      `agents.nickname (string | null): built by the migrations, missing from ${SCHEMA_FILE}`,
      `mcp_servers.description (string | null): in ${SCHEMA_FILE}, not built by the migrations`,
      `policies.description: ${SCHEMA_FILE} says string | null, the migrations build string`,
    ]);
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
});
