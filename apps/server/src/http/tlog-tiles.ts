/**
 * The audit log as C2SP `tlog-tiles` (features/audit/tlog-tiles.ts) at `/api/v1/audit/log`:
 * `checkpoint` (the latest signed note, text) and `tile/<L>/<N>[.p/<W>]`,
 * `tile/entries/<N>[.p/<W>]` (bytes). The paths are the format's, not the contract's
 * operations (a tile index spans path segments), so they have a router of their own in front of
 * the contract validator, after the same identity and rate limit; a key needs `audit:read`.
 * Tiles never change once served: they are cached for a year; the checkpoint is not cached.
 */
import { type Request, type RequestHandler, type Response, Router } from 'express';
import type { AuditService } from '../features/audit/audit.service.ts';
import { parseTilePath } from '../features/audit/tlog-tiles.ts';
import { ApiError } from '../shared/errors.ts';
import { identityRefusal } from './context.ts';

export const TLOG_PATH = '/audit/log';

/** The workspace of a key that may read the audit log (401 without a key, 403 without audit:read). */
function readerOf(req: Request): string {
  const auth = req.auth;
  if (!auth) throw identityRefusal(req);
  if (!auth.permissions.has('audit:read')) throw new ApiError('insufficient_permission', 'This key lacks the permission audit:read');
  return auth.workspaceId;
}

/**
 * First of the log's pipeline, before the key is checked: one URL is one log per key's
 * workspace, so a cache keys on the credential, and keeps no refusal (401, 403, 404, 429).
 */
export const tlogCaching: RequestHandler = (_req, res, next) => {
  res.set('Vary', 'Authorization').set('Cache-Control', 'no-store');
  next();
};

export function tlogTilesRouter(audit: AuditService): Router {
  const router = Router({ caseSensitive: true, strict: true });
  router.get('/checkpoint', async (req: Request, res: Response) => {
    const { note } = await audit.checkpoint(readerOf(req));
    res.type('text/plain; charset=utf-8').send(note);
  });
  router.get(/^\/tile\/(.+)$/, async (req: Request, res: Response) => {
    const workspaceId = readerOf(req);
    const request = parseTilePath(req.path.slice('/tile/'.length));
    if (!request)
      throw new ApiError(
        'not_found',
        'No such tile: paths are tile/<L>/<N>[.p/<W>] or tile/entries/<N>[.p/<W>], as C2SP tlog-tiles writes them',
      );
    const tile = await audit.tile(workspaceId, request);
    if (!tile) throw new ApiError('not_found', `Tile ${req.path.slice(1)} does not exist yet`);
    // a key's reads stay the key's: no shared cache keeps them
    res.set('Cache-Control', 'private, max-age=31536000, immutable').type('application/octet-stream').send(tile);
  });
  // nothing else lives under the log's prefix
  router.use((req) => {
    readerOf(req);
    throw new ApiError('not_found', `No ${req.method} ${req.baseUrl}${req.path}: the log serves checkpoint and tile/…`);
  });
  return router;
}
