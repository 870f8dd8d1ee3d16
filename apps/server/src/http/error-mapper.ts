/**
 * The one place that turns every error (ApiError, the validator's,
 * anything unexpected) into `{error:{code,message}}` with the right status.
 */
import { operations } from '@warden/contract';
import type { NextFunction, Request, Response } from 'express';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import type { Logger } from '../logger.ts';
import { ApiError } from '../shared/errors.ts';

/** Retry-After (seconds) on every 503: the database is expected back shortly. */
export const RETRY_AFTER_UNAVAILABLE_S = 2;

interface ValidatorError {
  status?: number;
  statusCode?: number;
  message?: string;
  errors?: Array<{ path?: string; message?: string }>;
}

const validationCodes = new Map(operations.map((row) => [row.operationId as string, row.validationErrorCodes]));

/**
 * `x-validation-error-codes` of the operation, applied to the first validation error (the
 * validator stops at the first failing schema, so the first error is the reason): the
 * longest request-path prefix that matches it names the code.
 */
function codeForValidation(req: Request, firstErrorPath: string): ApiError['code'] {
  const operationId = (req as { openapi?: { schema?: { operationId?: string } } }).openapi?.schema?.operationId;
  const table = (operationId && validationCodes.get(operationId)) || {};
  const prefix = Object.keys(table)
    .sort((a, b) => b.length - a.length)
    .find((p) => firstErrorPath === p || firstErrorPath.startsWith(`${p}/`));
  return prefix ? (table[prefix] as ApiError['code']) : 'invalid_request';
}

function toApiError(error: unknown, req: Request): ApiError {
  if (error instanceof ApiError) return error;
  // the router could not percent-decode a path segment
  if (error instanceof URIError) return new ApiError('invalid_request', 'The path is not validly percent-encoded', { cause: error });
  const e = error as ValidatorError;
  const status = e.status ?? e.statusCode;
  // express-openapi-validator
  if (Array.isArray(e.errors) && status !== undefined && status < 500) {
    const detail = e.errors.map((item) => `${item.path ?? ''} ${item.message ?? ''}`.trim()).join('; ');
    switch (status) {
      case 400:
        return new ApiError(codeForValidation(req, e.errors[0]?.path ?? ''), detail || 'Invalid request', { cause: error });
      case 404:
        return new ApiError('route_not_found', `No operation at ${req.method} ${req.path}`, { cause: error });
      case 405:
        return new ApiError('method_not_allowed', `${req.method} is not allowed on ${req.path}`, { cause: error });
      case 413:
        return new ApiError('payload_too_large', 'The body exceeds 1 MiB', { cause: error });
      case 415:
        return new ApiError('unsupported_media_type', 'The body must be application/json', { cause: error });
      default:
        return new ApiError('invalid_request', detail || 'Invalid request', { cause: error });
    }
  }
  // The database is unreachable (from the key lookup to the audit write): retry later, nothing was allowed.
  if (isDatabaseUnavailable(error)) {
    return new ApiError('service_unavailable', 'The database is unavailable; retry later', { cause: error });
  }
  return new ApiError('internal_error', 'Internal error', { cause: error });
}

export function errorMapper(logger: Logger) {
  return (error: unknown, req: Request, res: Response, _next: NextFunction) => {
    const apiError = toApiError(error, req);
    if (apiError.status >= 500 && apiError.code !== 'not_implemented') {
      logger.error('request failed', { requestId: req.requestId, code: apiError.code, cause: apiError.cause ?? error });
    }
    if (res.headersSent) return;
    res.set(apiError.headers);
    if (apiError.status === 503 && !res.get('Retry-After')) res.set('Retry-After', String(RETRY_AFTER_UNAVAILABLE_S));
    res.status(apiError.status).json({ error: { code: apiError.code, message: apiError.message } });
  };
}
