/**
 * The server's layers, checked by `npm run lint:layers` (part of `npm run lint`): see
 * docs/architecture.md. Type-only imports count (tsPreCompilationDeps), so a layer cannot lean
 * on another through its types either.
 */
const SRC = '^apps/server/src/';
const ENTRY_POINTS = `${SRC}(main|cli/main|.*\\.worker)\\.ts$`;

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'No import cycles, type-only imports included (but in generated code, which is not ours to shape: the SDK client hey-api writes).',
      from: { pathNot: 'packages/sdk/src/generated/' },
      to: { circular: true },
    },
    {
      name: 'handlers-get-services-only',
      severity: 'error',
      comment: 'Handlers reach the database through services only: never Kysely, db/ or a repository.',
      from: { path: '\\.handlers\\.ts$' },
      to: { path: ['(^|/)node_modules/kysely/', `${SRC}db/`, '\\.repository\\.ts$'] },
    },
    {
      name: 'features-know-no-http',
      severity: 'error',
      comment: 'Features (handlers included) know nothing of Express or the HTTP layer (http/, app.ts).',
      from: { path: `${SRC}features/` },
      to: { path: ['(^|/)node_modules/(@types/)?express(-serve-static-core)?/', `${SRC}http/`, `${SRC}app\\.ts$`] },
    },
    {
      name: 'queries-in-repositories',
      severity: 'error',
      comment: 'Only repositories (and db/) build queries: anywhere else Kysely is imported for its types only.',
      from: { path: SRC, pathNot: ['\\.repository\\.ts$', `${SRC}db/`] },
      to: { path: '(^|/)node_modules/kysely/', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'db-imports-no-feature',
      severity: 'error',
      comment: 'db/ is the bottom layer: it imports only db/ and shared/.',
      from: { path: `${SRC}db/` },
      to: { path: SRC, pathNot: [`${SRC}db/`, `${SRC}shared/`] },
    },
    {
      name: 'shared-imports-only-shared',
      severity: 'error',
      comment: 'shared/ (the error type, hashing, canonical JSON, handler types) is importable by every layer, so it imports none.',
      from: { path: `${SRC}shared/` },
      to: { path: SRC, pathNot: `${SRC}shared/` },
    },
    {
      name: 'acts-are-pure',
      severity: 'error',
      comment:
        'An act and its canonical forms (features/acts/) are pure: they import only acts/ and shared/, so every layer can read them.',
      from: { path: `${SRC}features/acts/` },
      to: { path: SRC, pathNot: [`${SRC}features/acts/`, `${SRC}shared/`] },
    },
    {
      name: 'audit-writer-is-private',
      severity: 'error',
      comment:
        'Events enter the log through audit.service.ts (AuditLog for acts, recordIn in a transaction): only audit/ and the composition root touch the group-commit writer.',
      from: { path: SRC, pathNot: [`${SRC}features/audit/`, `${SRC}composition\\.ts$`] },
      to: { path: `${SRC}features/audit/audit-writer\\.ts$` },
    },
    {
      name: 'edges-record-nothing-themselves',
      severity: 'error',
      comment: 'An edge (the MCP gateway) acts only through the act pipeline: it never writes audit events, approvals or any table itself.',
      from: { path: `${SRC}features/mcp-gateway/` },
      to: {
        path: [`${SRC}db/`, `${SRC}features/(audit|approvals|agents|policies)/`, '(^|/)node_modules/kysely/'],
        dependencyTypesNot: ['type-only'],
      },
    },
    {
      name: 'edges-keep-no-repository',
      severity: 'error',
      comment: 'An edge reads no table itself: who calls is identity, what runs is the execution layer.',
      from: { path: `${SRC}features/mcp-gateway/` },
      to: { path: '\\.repository\\.ts$', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'edges-act-through-the-pipeline',
      severity: 'error',
      comment:
        'An edge reaches upstreams through ExecutionService (decide, act, record), MCP tasks through McpTasks and client sessions through McpClientSessions: never the connector or a repository.',
      from: { path: `${SRC}features/mcp-gateway/` },
      to: {
        path: `${SRC}features/execution/`,
        pathNot: `${SRC}features/execution/(execution\\.service|mcp-tasks|mcp-client-sessions)\\.ts$`,
        dependencyTypesNot: ['type-only'],
      },
    },
    {
      name: 'no-orphans',
      severity: 'warn',
      comment:
        'Every module is used: reachable from an entry point (the server, the CLI; each worker thread runs a *.worker.ts loaded by URL).',
      from: { path: ENTRY_POINTS },
      to: { path: SRC, pathNot: [ENTRY_POINTS, '\\.d\\.ts$'], reachable: false },
    },
  ],
  options: {
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
  },
};
