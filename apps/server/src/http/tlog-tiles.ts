/**
 * The audit log as C2SP `tlog-tiles` (features/audit/tlog-tiles.ts): `checkpoint` (the latest
 * signed note, text) and `tile/<L>/<N>[.p/<W>]`, `tile/entries/<N>[.p/<W>]` (bytes), at two
 * prefixes: `/api/v1/audit/log` for a key with `audit:read` (its workspace's log), and
 * `/api/v1/audit/logs/<workspace id>` without a key for a workspace whose `audit_log_public`
 * setting is on (404 otherwise, as for one that does not exist). The paths are the format's,
 * not the contract's operations (a tile index spans path segments), so they have a router of
 * their own in front of the contract validator, after the same identity and rate limit (per IP
 * without a key). Tiles never change once served: cached for a year (`private` with a key,
 * `public` for a public log); the checkpoint and refusals are not cached.
 */
import { type Request, type RequestHandler, type Response, Router } from 'express';
import type { AuditService } from '../features/audit/audit.service.ts';
import { parseTilePath } from '../features/audit/tlog-tiles.ts';
import { ApiError } from '../shared/errors.ts';
import { identityRefusal } from './context.ts';

export const TLOG_PATH = '/audit/log';
export const PUBLIC_TLOG_PATH = '/audit/logs/:workspace';

/** Whose log a request reads: the workspace id, or a refusal thrown. */
type LogOf = (req: Request) => string | Promise<string>;

/** The workspace of a key that may read the audit log (401 without a key, 403 without audit:read). */
export const keyHoldersLog: LogOf = (req) => {
  const auth = req.auth;
  if (!auth) throw identityRefusal(req);
  if (!auth.permissions.has('audit:read')) throw new ApiError('insufficient_permission', 'This key lacks the permission audit:read');
  return auth.workspaceId;
};

/** The workspace named in the path, if it publishes its log; else 404, the answer for one that does not exist. */
export const publishedLog =
  (isPublic: (workspaceId: string) => Promise<boolean>): LogOf =>
  async (req) => {
    const workspaceId = String(req.params.workspace ?? '');
    if (!(await isPublic(workspaceId)))
      throw new ApiError('not_found', 'No public audit log here: a workspace publishes its log with the setting audit_log_public');
    return workspaceId;
  };

/**
 * First of the log's pipeline, before the key is checked: one URL is one log per key's
 * workspace, so a cache keys on the credential, and keeps no refusal (401, 403, 404, 429).
 */
export const tlogCaching: RequestHandler = (_req, res, next) => {
  res.set('Vary', 'Authorization').set('Cache-Control', 'no-store');
  next();
};

/** The same for a public log, whose answers do not depend on a credential. */
export const publicTlogCaching: RequestHandler = (_req, res, next) => {
  res.set('Cache-Control', 'no-store');
  next();
};

export function tlogTilesRouter(audit: AuditService, logOf: LogOf, cache: 'private' | 'public'): Router {
  const router = Router({ caseSensitive: true, strict: true, mergeParams: true });
  router.get('/checkpoint', async (req: Request, res: Response) => {
    const { note } = await audit.checkpoint(await logOf(req));
    res.type('text/plain; charset=utf-8').send(note);
  });
  router.get(/^\/tile\/(.+)$/, async (req: Request, res: Response) => {
    const workspaceId = await logOf(req);
    const request = parseTilePath(req.path.slice('/tile/'.length));
    if (!request)
      throw new ApiError(
        'not_found',
        'No such tile: paths are tile/<L>/<N>[.p/<W>] or tile/entries/<N>[.p/<W>], as C2SP tlog-tiles writes them',
      );
    const tile = await audit.tile(workspaceId, request);
    if (!tile) throw new ApiError('not_found', `Tile ${req.path.slice(1)} does not exist yet`);
    // a key's reads stay the key's (no shared cache keeps them); a public log's are anyone's
    res.set('Cache-Control', `${cache}, max-age=31536000, immutable`).type('application/octet-stream').send(tile);
  });
  // nothing else lives under the log's prefix
  router.use(async (req) => {
    await logOf(req);
    throw new ApiError('not_found', `No ${req.method} ${req.baseUrl}${req.path}: the log serves checkpoint and tile/…`);
  });
  return router;
}
