/**
 * The one error type, for every layer (services and repositories throw it too). `code` and
 * `message` are public (http/error-mapper.ts sends them to the client as
 * `{error:{code,message}}`); `cause` is internal and goes to the log only.
 */
import type { ErrorCode } from '@warden/contract';
import { truncate } from './text.ts';

/** The HTTP status of every error code: fixed per code, as the spec's ErrorCode says. */
export const STATUS_OF: Record<ErrorCode, number> = {
  invalid_request: 400,
  agent_context_required: 400,
  environment_context_required: 400,
  agent_identity_mismatch: 400,
  environment_mismatch: 400,
  evaluation_failed: 400,
  policy_evaluation_required: 400,
  invalid_execution_mode: 400,
  invalid_execution: 400,
  invalid_execution_url: 400,
  invalid_policy: 400,
  decision_note_required: 400,
  approval_invalid: 400,
  unauthorized: 401,
  agent_key_required: 401,
  invalid_agent_key: 401,
  insufficient_permission: 403,
  agent_not_found: 403,
  agent_inactive: 403,
  execution_proxy_required: 403,
  execution_target_denied: 403,
  approval_required: 403,
  origin_not_allowed: 403,
  insufficient_scope: 403,
  credential_host_not_bound: 403,
  agent_credentials_refused: 403,
  csrf_token_invalid: 403,
  not_found: 404,
  route_not_found: 404,
  mcp_server_not_found: 404,
  session_not_found: 404,
  credential_not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  approval_already_decided: 409,
  idempotency_key_reused: 409,
  idempotency_key_in_progress: 409,
  agent_key_in_use: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal_error: 500,
  not_implemented: 501,
  execution_failed: 502,
  discovery_failed: 502,
  call_failed: 502,
  session_failed: 502,
  upstream_authorization_required: 502,
  upstream_authorization_failed: 502,
  audit_persist_failed: 503,
  service_unavailable: 503,
};

/**
 * The spec's `maxLength` of `error.message`. Messages may quote client input (a CEL error
 * quotes the condition), so any may be long; an over-long one would fail response validation
 * and become a 500, so ApiError cuts it.
 */
export const MAX_MESSAGE_LENGTH = 2000;

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown; headers?: Record<string, string> },
  ) {
    super(truncate(message, MAX_MESSAGE_LENGTH), options);
    this.status = STATUS_OF[code];
    this.headers = options?.headers ?? {};
  }
  readonly headers: Record<string, string>;
}

export const notFound = (what: string, id: string) => new ApiError('not_found', `${what} '${id}' was not found`);
