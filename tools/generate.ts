/**
 * `npm run generate`: spec → spec/dist/openapi.json (with code samples) → SDK and contract (server) types;
 * and the migrations → the database's table types (apps/server/src/db/schema.ts, tools/db-schema.ts).
 * Deterministic: running it twice, or on an unchanged spec and migrations, changes no file.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
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
keepSdkResultTypes();
writeOperationTable(doc, 'packages/contract/src/generated/v1/operations.gen.ts');
writeOperationTable(dashboard, 'packages/contract/src/generated/dashboard/operations.gen.ts', {
  types: 'DashboardOperations',
  rows: 'dashboardOperations',
  ids: 'DashboardOperationId',
});
const dbSchemaMs = await dbSchema;
console.log(`generated in ${Math.round(performance.now() - started)} ms (${SCHEMA_FILE}: ${Math.round(dbSchemaMs)} ms)`);

/**
 * Since @hey-api/openapi-ts 0.97 the fetch client types a non-throwing result's `request` and
 * `response`, and an error interceptor's, as possibly undefined (hey-api/hey-api#3519). At run
 * time they were already undefined when no answer arrived (a network error, an abort); the types
 * said otherwise. The published SDK keeps the 0.1 types, so that integrators' code compiles as
 * before (`(await operations.getAgent(…)).response.status`); `createWarden`'s methods never
 * expose them. Each edit must match once, so a generator that changes these lines fails here.
 * (docs/decisions/0015-node-24-toolchain.md)
 */
function keepSdkResultTypes(): void {
  const edits: [file: string, from: string, to: string][] = [
    [
      'packages/sdk/src/generated/client/types.gen.ts',
      `            /** request may be undefined, because error may be from building the request object itself */
            request?: Request;
            /** response may be undefined, because error may be from building the request object itself or from a network error */
            response?: Response;`,
      `            request: Request;
            response: Response;`,
    ],
    [
      'packages/sdk/src/generated/client/utils.gen.ts',
      `  /** response may be undefined due to a network error where no response object is produced */
  response: Res | undefined,
  /** request may be undefined, because error may be from building the request object itself */
  request: Req | undefined,`,
      `  response: Res,
  request: Req,`,
    ],
    [
      // The interceptors' call: what the 0.95 client passed as `undefined as any` when there was no answer.
      'packages/sdk/src/generated/client/client.gen.ts',
      'finalError = await fn(finalError, response, request, options as ResolvedRequestOptions);',
      'finalError = await fn(finalError, response as Response, request as Request, options as ResolvedRequestOptions);',
    ],
  ];
  for (const [file, from, to] of edits) {
    const text = readFileSync(file, 'utf8');
    const at = text.indexOf(from);
    if (at < 0 || text.indexOf(from, at + 1) >= 0) throw new Error(`generate: keepSdkResultTypes: ${file} changed`);
    writeFileSync(file, text.replace(from, to));
  }
}
