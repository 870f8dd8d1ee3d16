/**
 * The `operation` label of a request that the contract validator did not match (it matches only
 * requests that reach it): a refusal before it (401, 429, 413) is labelled by the operation its
 * method and path were aimed at, from the contracts' operation tables; the routes outside the
 * contracts have names of their own. Only a path nothing serves is `unmatched`, so the label
 * stays a closed set.
 */
import { dashboard, type OperationRow, operations } from '@warden/contract';

/** Routes outside the contracts, by exact path. */
const FIXED: Record<string, string> = {
  '/livez': 'livez',
  '/readyz': 'readyz',
  '/api/v1/openapi.json': 'openapi.json',
};

interface Pattern {
  method: string;
  regex: RegExp;
  operationId: string;
  /** Literal segments: `/policies/simulate` is tried before `/policies/{id}`. */
  literals: number;
}

function patterns(base: string, rows: readonly OperationRow[]): Pattern[] {
  return rows.map((row) => {
    const segments = row.path.split('/').filter(Boolean);
    const source = segments.map((s) => (s.startsWith('{') ? '[^/]+' : s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))).join('/');
    return {
      method: row.method.toUpperCase(),
      regex: new RegExp(`^${base}/${source}/?$`),
      operationId: row.operationId,
      literals: segments.filter((s) => !s.startsWith('{')).length,
    };
  });
}

/** Labels a request by method and path (no query): an operation id, a route's name, or `unmatched`. */
export function createRouteLabels(v1Base = '/api/v1', dashboardBase = '/dashboard/api'): (method: string, path: string) => string {
  const table = [...patterns(v1Base, operations), ...patterns(dashboardBase, dashboard.dashboardOperations)].sort(
    (a, b) => b.literals - a.literals,
  );
  const mcp = new RegExp(`^${v1Base}/mcp(/[^/]+)?/?$`);
  return (method, path) => {
    const fixed = FIXED[path];
    if (fixed) return fixed;
    if (mcp.test(path)) return 'mcp.gateway';
    if (method === 'OPTIONS' && path.startsWith(`${v1Base}/`)) return 'cors.preflight';
    for (const pattern of table) if (pattern.method === method && pattern.regex.test(path)) return pattern.operationId;
    if (path === '/docs' || path.startsWith('/docs/')) return 'docs';
    if ((path === '/dashboard' || path.startsWith('/dashboard/')) && !path.startsWith(`${dashboardBase}/`)) return 'dashboard.app';
    return 'unmatched';
  };
}
