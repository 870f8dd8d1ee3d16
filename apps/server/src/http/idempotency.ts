/**
 * `Idempotency-Key` on the v1 API's POSTs, as Stripe has it: the first answer to a key (2xx
 * and 4xx; not 5xx, so a retry runs again) is stored before it is sent and replayed, with
 * `Idempotent-Replayed: true`, to a request with the same key and the same fingerprint
 * (method, path, canonical JSON body, agent key); another request under the key is 409
 * `idempotency_key_reused`, the same one while the first still runs 409
 * `idempotency_key_in_progress`. Keys are scoped by workspace and API key and kept 24 hours
 * (features/idempotency). Runs after contract validation, so an invalid request stores nothing.
 * A secret shown once is not kept: its replay answers without it.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { IdempotencyScope, IdempotencyService } from '../features/idempotency/idempotency.service.ts';
import type { Logger } from '../logger.ts';
import { stableJson } from '../shared/canonical-json.ts';
import { hashSecret } from '../shared/crypto.ts';
import { ApiError } from '../shared/errors.ts';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAYED_HEADER = 'Idempotent-Replayed';
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

/** What makes two requests "the same" under one key. */
function fingerprint(req: Request): string {
  const agentKey = req.get('x-warden-agent-key');
  return hashSecret(
    `${req.method} ${req.originalUrl}\n${agentKey === undefined ? '-' : hashSecret(agentKey)}\n${stableJson(req.body ?? null)}`,
  );
}

/**
 * The answer as kept for replays: without a secret shown once (the agent key Warden generated,
 * `data.api_key`), which is then stored nowhere; a replay answers the agent without it.
 */
function withoutShownOnce(body: unknown): unknown {
  const data = (body as { data?: unknown } | null)?.data;
  if (typeof data !== 'object' || data === null || !('api_key' in data)) return body;
  const { api_key: _shownOnce, ...kept } = data as Record<string, unknown>;
  return { ...(body as object), data: kept };
}

export function idempotency(service: IdempotencyService, logger: Logger): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    const key = req.get(IDEMPOTENCY_HEADER);
    if (req.method !== 'POST' || key === undefined || !req.auth) return next();
    if (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
      throw new ApiError('invalid_request', `Idempotency-Key must be 1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`);
    }
    const scope: IdempotencyScope = { workspaceId: req.auth.workspaceId, apiKeyId: req.auth.keyId, key };
    const begun = await service.begin(scope, fingerprint(req));
    if (begun.kind === 'replay') {
      res.setHeader(REPLAYED_HEADER, 'true');
      res.status(begun.status);
      if (begun.status === 204 || begun.body === '') return void res.end();
      res.setHeader('Content-Type', 'application/json; charset=utf-8');
      res.setHeader('Content-Length', Buffer.byteLength(begun.body));
      return void res.end(begun.body);
    }
    // The answer is kept (or the key released) before it leaves, so a retry never runs twice.
    const send = res.json;
    let settled = false;
    res.json = function (this: Response, body: unknown) {
      if (settled) return send.call(this, body);
      settled = true;
      const status = this.statusCode;
      const kept =
        status >= 500
          ? service.release(scope)
          : service.complete(scope, status, status === 204 ? '' : (JSON.stringify(withoutShownOnce(body)) ?? ''));
      kept
        .catch((error) => logger.error('idempotency key not updated', { requestId: req.requestId, cause: error }))
        .then(() => send.call(this, body))
        .catch(next);
      return this;
    };
    next();
  };
}
