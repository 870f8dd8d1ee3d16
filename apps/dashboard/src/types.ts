/**
 * The dashboard API's types, generated from spec/dist/dashboard.json. Type-only: nothing of the
 * contract package ends up in the browser bundle.
 */
export type {
  Agent,
  AgentEnvironment,
  AgentPage,
  Approval,
  ApprovalDecision,
  ApprovalPage,
  ApprovalResponse,
  AuditEvent,
  AuditEventPage,
  AuditResult,
  AuditVerification,
  Billing,
  ComplianceControl,
  ComplianceStatus,
  DefaultDecision,
  Deleted,
  Error as ApiErrorBody,
  ErrorCode,
  Login,
  Permission,
  Plan,
  PlanChange,
  RotateSecret,
  Session,
  Settings,
  SettingsResponse,
  SettingsUpdate,
  Severity,
  WebhookDelivery,
  WebhookDeliveryPage,
  WebhookDeliveryResponse,
  WebhookEndpoint,
  WebhookEndpointCreate,
  WebhookEndpointPage,
  WebhookEndpointResponse,
  WebhookEndpointUpdate,
  WebhookEndpointWithSecret,
  WebhookEventType,
} from '../../../packages/contract/src/generated/dashboard/types.gen.ts';

import type { Session } from '../../../packages/contract/src/generated/dashboard/types.gen.ts';

/** What `GET /session` and `POST /session` answer, unwrapped. */
export type SessionData = Session['data'];
