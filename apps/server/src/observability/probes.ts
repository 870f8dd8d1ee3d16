/**
 * Probes for an orchestrator, outside the API (no key, no rate limit, not in the contract):
 * - GET /livez: the process answers (no database round trip): 200 `{"status":"ok"}`.
 * - GET /readyz: the process should get traffic: 200 when the database answers within
 *   READY_TIMEOUT_MS and the audit writer's last statement committed (or failed more than
 *   AUDIT_FAILURE_WINDOW_MS ago), 503 otherwise and from the moment a shutdown begins. The
 *   body names each check: `{"status":"ready"|"not_ready","checks":{"database":…,"audit_writer":…,"shutdown":…}}`.
 * GET /api/v1/health stays as it was (public and cheap).
 */
import type { RequestHandler } from 'express';

/** A readiness check of the database gives up after this long. */
export const READY_TIMEOUT_MS = 2_000;
/**
 * A failed group commit keeps the process not ready this long unless one commits meanwhile: a
 * process taken out of traffic gets no requests to commit, so its failure has to age out.
 */
export const AUDIT_FAILURE_WINDOW_MS = 5_000;

export interface ReadinessSources {
  /** Resolves when the database answers a round trip. */
  pingDatabase(): Promise<unknown>;
  /** When the audit writer's last statement failed, if none has committed since. */
  auditFailingSince(): number | undefined;
}

export interface Probes {
  live: RequestHandler;
  ready: RequestHandler;
  /** Readiness answers 503 from now on (a shutdown began). */
  stopping(): void;
  check(): Promise<{ ready: boolean; checks: Record<string, string> }>;
}

export function createProbes(sources: ReadinessSources): Probes {
  let stopping = false;
  const check = async () => {
    let timer: NodeJS.Timeout | undefined;
    const database = await Promise.race([
      sources.pingDatabase().then(
        () => 'ok',
        () => 'unreachable',
      ),
      new Promise<string>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), READY_TIMEOUT_MS);
      }),
    ]);
    clearTimeout(timer);
    const failedAt = sources.auditFailingSince();
    const auditWriter = failedAt !== undefined && Date.now() - failedAt < AUDIT_FAILURE_WINDOW_MS ? 'failing' : 'ok';
    const checks = { database, audit_writer: auditWriter, shutdown: stopping ? 'in_progress' : 'no' };
    return { ready: !stopping && database === 'ok' && auditWriter === 'ok', checks };
  };
  const noStore = { 'Cache-Control': 'no-store' };
  return {
    live: (_req, res) => {
      res.set(noStore).status(200).json({ status: 'ok' });
    },
    ready: async (_req, res) => {
      const { ready, checks } = await check();
      res
        .set(noStore)
        .status(ready ? 200 : 503)
        .json({ status: ready ? 'ready' : 'not_ready', checks });
    },
    stopping: () => {
      stopping = true;
    },
    check,
  };
}
