/**
 * @agentwarden/sdk — the typed client of the Warden API.
 *
 * Runs on fetch and Web Crypto only: Node 20+, browsers, Deno, Bun and edge runtimes.
 * Nothing here (or below) imports a Node built-in.
 */

export type { VerifiedCheckpoint, VerifyCheckpointOptions } from './audit-checkpoints.js';
export { verifyCheckpoint } from './audit-checkpoints.js';
export type { AuditProofErrorCode } from './audit-errors.js';
export { AuditProofError, isAuditProofError } from './audit-errors.js';
export type { HashInput, VerifyConsistencyInput, VerifyInclusionInput } from './audit-proofs.js';
export { leafHash, verifyConsistency, verifyInclusion } from './audit-proofs.js';
export type { ProveOptions, VerifiedInclusion } from './audit-prove.js';
export type { TlogPolicy } from './audit-tlog-policy.js';
export { parseTlogPolicy, quorumMet, verifyCheckpointWithPolicy } from './audit-tlog-policy.js';
export { formatTlogProof, TLOG_PROOF_HEADER, verifyTlogProof } from './audit-tlog-proof.js';
export type { RequestOptions, Warden, WardenOptions } from './client.js';
export { AGENT_KEY_HEADER, createWarden, DEFAULT_BASE_URL, DEFAULT_TIMEOUT_MS, OPERATION_METHODS } from './client.js';
export type { WardenErrorCode, WardenErrorInit } from './errors.js';
export { isWardenError, WardenError } from './errors.js';
/** The generated operations, for the raw `{data, error, response}` style (pass `{ client: warden.client }`). */
export * as operations from './generated/sdk.gen.js';
/** Every schema and operation type of the spec (`Agent`, `Policy`, `ErrorCode`, `ListAgentsData`…). */
export type * from './generated/types.gen.js';
export type { Page } from './pagination.js';
export { paginate } from './pagination.js';
export type { RetryOptions } from './retry.js';
export type { VerifyWebhookOptions, WebhookEvent, WebhookEventOf, WebhookEventType, WebhookHeaders } from './webhooks.js';
export { verifyWebhook, WebhookVerificationError } from './webhooks.js';
