/**
 * What services and workers report about their work, as a small interface: the composition
 * root hands them the Prometheus implementation (metrics.ts) or NO_TELEMETRY, so no feature
 * imports prom-client. Every label is from a closed set (no ids, no names a user chose): the
 * number of series stays bounded whatever the workspaces do.
 */

/** Where a decision came from (`source` of its audit event). */
export type DecisionSource = string;
export type DecisionResult = 'allowed' | 'blocked' | 'pending_approval' | string;
export type WebhookOutcome = 'succeeded' | 'retry' | 'failed' | 'gone' | 'released';

export interface Telemetry {
  /** A decision answered (its audit event committed). */
  decision(result: DecisionResult, source: DecisionSource): void;
  /** An approval created by a decision or by POST /approvals. */
  approvalCreated(): void;
  /** An approval decided, with how long it waited. */
  approvalDecided(status: 'approved' | 'rejected', waitedSeconds: number): void;
  /** A decision on an approval that had expired (it is expired from then on). */
  approvalExpired(): void;
  /** One group-commit statement of the audit writer: how many events, how long, and whether it committed. */
  auditCommit(events: number, seconds: number, ok: boolean): void;
  /** A webhook delivery attempt's outcome. */
  webhookDelivery(outcome: WebhookOutcome, seconds: number): void;
  /** A request refused by the rate limit. */
  rateLimited(api: 'v1' | 'dashboard'): void;
}

const nothing = () => {};

/** Telemetry that records nothing (metrics off, tests, the CLI). */
export const NO_TELEMETRY: Telemetry = Object.freeze({
  decision: nothing,
  approvalCreated: nothing,
  approvalDecided: nothing,
  approvalExpired: nothing,
  auditCommit: nothing,
  webhookDelivery: nothing,
  rateLimited: nothing,
});
