/** Row types of the tables (db/migrations). Rows never leave the repositories as such. */
import type { ColumnType, Generated } from 'kysely';

/** A timestamptz with a default: optional on insert. */
type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
/** A nullable timestamptz. */
type NullableTimestamp = ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
type Json = ColumnType<unknown, string, string>;

export interface WorkspacesTable {
  id: string;
  slug: string;
  name: string;
  rate_limit_per_minute: number | null;
  plan: Generated<string>;
  billing_status: Generated<string>;
  policy_version: Generated<number>;
  agents_version: Generated<number>;
  mcp_servers_version: Generated<number>;
  created_at: Timestamp;
}

/** The default decision per environment (db/migrations/0016); no row: `allow` everywhere. */
export interface WorkspaceSettingsTable {
  workspace_id: string;
  default_development: Generated<string>;
  default_staging: Generated<string>;
  default_production: Generated<string>;
  updated_at: Timestamp;
}

export interface ApiKeysTable {
  workspace_id: string;
  id: string;
  name: string;
  prefix: string;
  key_hash: string;
  permissions: string[];
  created_at: Timestamp;
  revoked_at: NullableTimestamp;
}

export interface AgentsTable {
  workspace_id: string;
  id: string;
  slug: string;
  name: string;
  provider: string;
  status: string;
  environment: string;
  risk_level: string | null;
  description: string | null;
  model: string | null;
  tags: string[];
  allowed_tools: string[];
  allowed_resources: string[];
  api_key_hash: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface PoliciesTable {
  workspace_id: string;
  id: string;
  name: string;
  description: string | null;
  enabled: boolean;
  mode: string;
  priority: number;
  rules: Json;
  version: Generated<number>;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface McpServersTable {
  workspace_id: string;
  id: string;
  slug: string;
  name: string;
  transport_url: string;
  transport: string;
  description: string | null;
  enabled: boolean;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface ApprovalsTable {
  workspace_id: string;
  id: string;
  title: string;
  description: string | null;
  priority: string;
  type: string;
  status: string;
  agent_id: string | null;
  agent_slug: string | null;
  policy_name: string | null;
  action: string | null;
  resource: string | null;
  context: Json;
  input_digest: string | null;
  environment: string | null;
  tool: string | null;
  execution: Json | null;
  rule_id: string | null;
  policy_version: number | null;
  requested_by: string | null;
  decision_note: string | null;
  decided_by: string | null;
  decided_at: NullableTimestamp;
  expires_at: Timestamp;
  consumed_at: NullableTimestamp;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface AuditEventsTable {
  workspace_id: string;
  id: string;
  event_timestamp: Timestamp;
  source: string;
  agent: string | null;
  agent_id: string | null;
  action: string;
  resource: string | null;
  tool: string | null;
  environment: string | null;
  user_name: string | null;
  policy: string | null;
  result: string;
  severity: string;
  message: string | null;
  approval_id: string | null;
  request_id: string | null;
  context: Json;
}

export interface OutboxEventsTable {
  workspace_id: string;
  id: string;
  type: string;
  data: Json;
  created_at: Timestamp;
  dispatched_at: NullableTimestamp;
}

export interface WebhookEndpointsTable {
  workspace_id: string;
  id: string;
  url: string;
  description: string | null;
  events: string[];
  paused: Generated<boolean>;
  disabled_at: NullableTimestamp;
  secret_encrypted: string;
  previous_secret_encrypted: string | null;
  previous_secret_expires_at: NullableTimestamp;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface WebhookDeliveriesTable {
  workspace_id: string;
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  status: string;
  attempts: Generated<number>;
  next_attempt_at: Timestamp;
  locked_until: NullableTimestamp;
  last_attempt_at: NullableTimestamp;
  response_status: number | null;
  response_body: string | null;
  last_error: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

/** A workspace's Merkle tree: its size and root (hex). */
export interface AuditTreeHeadsTable {
  workspace_id: string;
  /** Defaults: the empty tree (size 0, root SHA-256 of nothing). */
  tree_size: ColumnType<number, number | undefined, number>;
  root_hash: ColumnType<string, string | undefined, string>;
}

/** Complete aligned subtrees above the leaves: (level, node_index) covers leaves [index·2^level, (index+1)·2^level). */
export interface AuditTreeNodesTable {
  workspace_id: string;
  level: number;
  node_index: number;
  hash: string;
}

/** Signed checkpoints (C2SP tlog-checkpoint notes). */
export interface AuditCheckpointsTable {
  workspace_id: string;
  tree_size: number;
  root_hash: string;
  checkpoint_timestamp: Timestamp;
  key_id: string;
  note: string;
}

/** Where the last verification of a workspace's tree ended (size and right edge, hex hashes). */
export interface AuditVerificationsTable {
  workspace_id: string;
  tree_size: number;
  frontier: Json;
  rechecked_to: ColumnType<number, number | undefined, number>;
  verified_at: Timestamp;
}

/** Events not sealed yet, queued with their insert and removed when sealed. */
export interface AuditUnsealedTable {
  workspace_id: string;
  event_timestamp: Timestamp;
  event_id: string;
}

export interface AuditSealsTable {
  workspace_id: string;
  sequence: number;
  event_id: string;
  event_timestamp: Timestamp;
  hash: string;
  sealed_at: Timestamp;
}

export interface McpSessionsTable {
  workspace_id: string;
  id: string;
  server_id: string;
  agent_id: string;
  expires_at: Timestamp;
  created_at: Timestamp;
}

export interface McpGatewayTasksTable {
  workspace_id: string;
  id: string;
  agent_id: string;
  server_id: string;
  upstream_url: string;
  upstream_session_id: string | null;
  protocol_version: string | null;
  upstream_task_id: string | null;
  outcome_basis: Json | null;
  finished_at: NullableTimestamp;
  expires_at: Timestamp;
  created_at: Timestamp;
}

export interface DashboardSessionsTable {
  workspace_id: string;
  id: string;
  token_hash: string;
  key_id: string;
  csrf_token: string;
  expires_at: Timestamp;
  created_at: Timestamp;
}

export interface SchemaMigrationsTable {
  name: string;
  applied_at: Timestamp;
}

export interface IdempotencyKeysTable {
  workspace_id: string;
  api_key_id: string;
  idempotency_key: string;
  request_hash: string;
  status: number | null;
  response_body: string | null;
  locked_until: Date;
  created_at: Generated<Date>;
  expires_at: Date;
}

export interface DB {
  workspaces: WorkspacesTable;
  workspace_settings: WorkspaceSettingsTable;
  api_keys: ApiKeysTable;
  agents: AgentsTable;
  policies: PoliciesTable;
  mcp_servers: McpServersTable;
  approvals: ApprovalsTable;
  audit_events: AuditEventsTable;
  outbox_events: OutboxEventsTable;
  audit_tree_heads: AuditTreeHeadsTable;
  audit_tree_nodes: AuditTreeNodesTable;
  audit_checkpoints: AuditCheckpointsTable;
  audit_verifications: AuditVerificationsTable;
  audit_seals: AuditSealsTable;
  audit_unsealed: AuditUnsealedTable;
  mcp_sessions: McpSessionsTable;
  mcp_gateway_tasks: McpGatewayTasksTable;
  webhook_endpoints: WebhookEndpointsTable;
  webhook_deliveries: WebhookDeliveriesTable;
  dashboard_sessions: DashboardSessionsTable;
  idempotency_keys: IdempotencyKeysTable;
  schema_migrations: SchemaMigrationsTable;
}
