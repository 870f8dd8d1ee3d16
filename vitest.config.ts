import { configDefaults, defineConfig } from 'vitest/config';

/**
 * The tests whose outcome does not depend on the database under test: pure logic, the HTTP
 * layer's library patches, the spec and its tools (the schema generator migrates an in-memory
 * PGlite of its own), the SDK's offline helpers. They run in the `no-database` project,
 * everything else in `database`; `npm test` runs both, and CI's second run, on PostgreSQL, only
 * `database` (`--project database`), so nothing runs twice that the database cannot change. A
 * file here that starts a test server or opens a test database fails at once
 * (WARDEN_TEST_NO_DATABASE, tests/support/).
 */
const NO_DATABASE = [
  '**/*.unit.test.ts',
  'apps/dashboard/test/**/*.test.ts',
  'apps/server/test/{db-unavailable,http-server,request-context,validator}.test.ts',
  'tests/bench/**/*.test.ts',
  'tests/contract/{architecture-doc,db-schema,spec,spec-compat,typecheck-drift}.test.ts',
  'tests/egress/**/*.test.ts',
  'tests/sdk/{audit-proofs,webhook-types,webhooks}.test.ts',
];

export default defineConfig({
  test: {
    exclude: configDefaults.exclude,
    // vitest's report, and progress and what was skipped (tools/test-progress.ts)
    reporters: ['default', './tools/test-progress.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // The one limit on waiting for something to appear (expect.poll, the browser tests' notices
    // and rows): generous, since CI machines differ in speed and a wait that passes returns as
    // soon as its condition holds. No test sets a shorter one of its own.
    expect: { poll: { timeout: 20_000, interval: 50 } },
    // Each test file starts its own server on its own fresh database.
    pool: 'forks',
    maxWorkers: 2,
    // A worker runs file after file in one process, its modules loaded once: the server's
    // imports cost a fork 2 s of CPU per file (241 s of the embedded run's 1,600 s wall, under
    // load; 25 s without isolation), and no file relies on a fresh process (the whole suite
    // passes either way; docs/decisions/0016-ci-time.md).
    isolate: false,
    projects: [
      {
        extends: true,
        test: {
          name: 'database',
          include: ['tests/**/*.test.ts', 'apps/*/test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...NO_DATABASE],
        },
      },
      { extends: true, test: { name: 'no-database', include: NO_DATABASE, env: { WARDEN_TEST_NO_DATABASE: 'true' } } },
    ],
  },
});
