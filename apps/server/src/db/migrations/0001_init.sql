-- Warden schema, version 1.
--
-- Tenancy: every tenant table carries workspace_id, and every primary key, unique constraint
-- and foreign key includes it, so the schema can be distributed on Citus by workspace_id
-- without a rewrite (DESIGN.md). Two tables are global and would be Citus reference tables:
-- workspaces (the tenant root) and api_keys (looked up by key hash before the workspace is
-- known; small, written rarely).

CREATE TABLE workspaces (
  id uuid PRIMARY KEY,
  slug text NOT NULL UNIQUE,
  name text NOT NULL,
  rate_limit_per_minute integer CHECK (rate_limit_per_minute > 0),
  plan text NOT NULL DEFAULT 'free',
  billing_status text NOT NULL DEFAULT 'active',
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  name text NOT NULL,
  prefix text NOT NULL,
  -- SHA-256 of the whole key, hex. The key itself is never stored.
  key_hash text NOT NULL UNIQUE,
  permissions text[] NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz,
  PRIMARY KEY (workspace_id, id)
);

CREATE TABLE agents (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  slug text NOT NULL,
  name text NOT NULL,
  provider text NOT NULL,
  status text NOT NULL,
  environment text NOT NULL,
  risk_level text,
  description text,
  model text,
  tags text[] NOT NULL DEFAULT '{}',
  allowed_tools text[] NOT NULL DEFAULT '{}',
  allowed_resources text[] NOT NULL DEFAULT '{}',
  api_key_hash text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  UNIQUE (workspace_id, slug)
);
CREATE INDEX agents_page ON agents (workspace_id, created_at DESC, id DESC);
CREATE INDEX agents_key ON agents (workspace_id, api_key_hash) WHERE api_key_hash IS NOT NULL;

CREATE TABLE policies (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  name text NOT NULL,
  description text,
  enabled boolean NOT NULL,
  mode text NOT NULL,
  priority integer NOT NULL,
  rules jsonb NOT NULL,
  version integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  UNIQUE (workspace_id, name)
);
CREATE INDEX policies_page ON policies (workspace_id, created_at DESC, id DESC);

CREATE TABLE mcp_servers (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  slug text NOT NULL,
  name text NOT NULL,
  transport_url text NOT NULL,
  transport text NOT NULL,
  description text,
  enabled boolean NOT NULL DEFAULT true,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  UNIQUE (workspace_id, slug)
);
CREATE INDEX mcp_servers_page ON mcp_servers (workspace_id, created_at DESC, id DESC);

CREATE TABLE approvals (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  title text NOT NULL,
  description text,
  priority text NOT NULL,
  type text NOT NULL,
  status text NOT NULL,
  agent_id uuid,
  agent_slug text,
  policy_name text,
  action text,
  resource text,
  context jsonb NOT NULL DEFAULT '{}',
  requested_by text,
  decision_note text,
  decided_by text,
  decided_at timestamptz,
  expires_at timestamptz NOT NULL,
  consumed_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id)
);
CREATE INDEX approvals_page ON approvals (workspace_id, created_at DESC, id DESC);

-- Audit events are partitioned by time: retention drops whole partitions, never rows.
-- The server creates the partitions of the current and next month at start (see
-- ensureAuditPartitions); the default partition only catches what falls outside them.
CREATE TABLE audit_events (
  workspace_id uuid NOT NULL,
  id uuid NOT NULL,
  event_timestamp timestamptz NOT NULL,
  source text NOT NULL,
  agent text,
  agent_id uuid,
  action text NOT NULL,
  resource text,
  tool text,
  environment text,
  user_name text,
  policy text,
  result text NOT NULL,
  severity text NOT NULL,
  message text,
  approval_id uuid,
  request_id text,
  context jsonb NOT NULL DEFAULT '{}',
  PRIMARY KEY (workspace_id, event_timestamp, id)
) PARTITION BY RANGE (event_timestamp);
CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;
CREATE INDEX audit_events_page ON audit_events (workspace_id, event_timestamp DESC, id DESC);

-- Outbox: events for webhook delivery, written in the same transaction as their cause.
CREATE TABLE outbox_events (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  type text NOT NULL,
  data jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id)
);
CREATE INDEX outbox_events_created ON outbox_events (created_at, workspace_id, id);
