/**
 * `npm run generate`: spec → spec/dist/openapi.json (with code samples) → SDK and contract (server) types;
 * and the migrations → the database's table types (apps/server/src/db/schema.ts, tools/db-schema.ts).
 * Deterministic: running it twice, or on an unchanged spec and migrations, changes no file.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { createClient } from '@hey-api/openapi-ts';
import { bundleSpec } from './bundle.ts';
import { addCodeSamples } from './code-samples.ts';
import { SCHEMA_FILE, writeDbSchema } from './db-schema.ts';
import { writeOperationTable } from './operation-table.ts';

const BUNDLE = 'spec/dist/openapi.json';
const DASHBOARD_BUNDLE = 'spec/dist/dashboard.json';

const started = performance.now();
// Mostly PGlite starting: it runs beside the spec's generation.
const dbSchema = writeDbSchema();
const doc = bundleSpec('spec/openapi.yaml');
addCodeSamples(doc);
const dashboard = bundleSpec('spec/dashboard/openapi.yaml');
mkdirSync('spec/dist', { recursive: true });
writeFileSync(BUNDLE, `${JSON.stringify(doc, null, 2)}\n`);
writeFileSync(DASHBOARD_BUNDLE, `${JSON.stringify(dashboard, null, 2)}\n`);

await createClient([
  {
    input: `./${BUNDLE}`,
    output: { path: './packages/sdk/src/generated', clean: true },
    plugins: ['@hey-api/client-fetch', '@hey-api/typescript', '@hey-api/sdk'],
    logs: { level: 'silent' },
  },
  {
    input: `./${BUNDLE}`,
    output: { path: './packages/contract/src/generated/v1', clean: true },
    plugins: ['@hey-api/typescript'],
    logs: { level: 'silent' },
  },
  {
    input: `./${DASHBOARD_BUNDLE}`,
    output: { path: './packages/contract/src/generated/dashboard', clean: true },
    plugins: ['@hey-api/typescript'],
    logs: { level: 'silent' },
  },
]);
writeOperationTable(doc, 'packages/contract/src/generated/v1/operations.gen.ts');
writeOperationTable(dashboard, 'packages/contract/src/generated/dashboard/operations.gen.ts', {
  types: 'DashboardOperations',
  rows: 'dashboardOperations',
  ids: 'DashboardOperationId',
});
const dbSchemaMs = await dbSchema;
console.log(`generated in ${Math.round(performance.now() - started)} ms (${SCHEMA_FILE}: ${Math.round(dbSchemaMs)} ms)`);
