-- Brokered upstream credentials (docs/decisions/0020-upstream-credentials.md): Warden holds the
-- secrets upstreams ask for, so agents need none. Secrets are sealed with the master key
-- (AES-256-GCM, as webhook secrets are) and never read back through the API.

-- How Warden authenticates to a registered MCP server: one secret header.
ALTER TABLE mcp_servers
  ADD COLUMN auth_type text CHECK (auth_type IN ('bearer', 'header')),
  ADD COLUMN auth_header text,
  ADD COLUMN auth_secret_encrypted text,
  ADD COLUMN auth_hint text,
  ADD CONSTRAINT mcp_servers_auth_complete CHECK (
    (auth_type IS NULL AND auth_header IS NULL AND auth_secret_encrypted IS NULL AND auth_hint IS NULL)
    OR (auth_type IS NOT NULL AND auth_header IS NOT NULL AND auth_secret_encrypted IS NOT NULL AND auth_hint IS NOT NULL)
  );
COMMENT ON COLUMN mcp_servers.auth_type IS '''bearer'' (Authorization: Bearer <secret>) or ''header'' (auth_header: <secret>); NULL: Warden sends no credential.';
COMMENT ON COLUMN mcp_servers.auth_header IS 'The header the secret travels in, lower-case (''authorization'' for bearer).';
COMMENT ON COLUMN mcp_servers.auth_secret_encrypted IS 'The secret, sealed with the master key (features/webhooks/secrets.ts); never returned.';
COMMENT ON COLUMN mcp_servers.auth_hint IS 'The secret''s last four characters, the most the API shows of it.';

-- Named credentials of the HTTP proxy: injected only into requests to one of their hosts.
CREATE TABLE credentials (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  name text NOT NULL,
  description text,
  hosts text[] NOT NULL CHECK (cardinality(hosts) > 0),
  auth_type text NOT NULL CHECK (auth_type IN ('bearer', 'header')),
  auth_header text NOT NULL,
  secret_encrypted text NOT NULL,
  hint text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  UNIQUE (workspace_id, name)
);
CREATE INDEX credentials_page ON credentials (workspace_id, created_at DESC, id DESC);
COMMENT ON COLUMN credentials.name IS 'What an execution names (execution.credential); unique per workspace.';
COMMENT ON COLUMN credentials.hosts IS 'Lower-case host names the credential may be sent to; any other host is refused before anything is sent.';
COMMENT ON COLUMN credentials.auth_header IS 'The header the secret travels in, lower-case (''authorization'' for bearer).';
COMMENT ON COLUMN credentials.secret_encrypted IS 'The secret, sealed with the master key (features/webhooks/secrets.ts); never returned.';
COMMENT ON COLUMN credentials.hint IS 'The secret''s last four characters, the most the API shows of it.';

-- "Agents hold no credentials": the HTTP proxy refuses agent-supplied credential headers.
-- Compiled into the policy set like the default decisions (the settings trigger bumps policy_version).
ALTER TABLE workspace_settings ADD COLUMN agents_hold_no_credentials boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN workspace_settings.agents_hold_no_credentials IS 'When true, the HTTP proxy refuses executions whose own headers carry a credential (Authorization, Cookie, API-key headers).';
