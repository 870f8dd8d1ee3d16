-- The built-in OAuth authorization server (docs/decisions/0021-oauth-authorization-servers.md):
-- registered clients, authorizations waiting for consent, grants (consent given: a client acts
-- as one agent of one workspace, for one resource, with scopes), and the codes and tokens of a
-- grant. Codes and tokens are kept by their SHA-256 only, never in the clear.
CREATE TABLE oauth_clients (
  client_id text PRIMARY KEY,
  metadata jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON COLUMN oauth_clients.metadata IS 'The client''s registration (RFC 7591 client metadata, as the SDK validated it), client_secret included when one was issued.';

CREATE TABLE oauth_authorizations (
  id uuid PRIMARY KEY,
  client_id text NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
  redirect_uri text NOT NULL,
  code_challenge text NOT NULL,
  scopes text[] NOT NULL,
  resource text NOT NULL,
  state text,
  expires_at timestamptz NOT NULL
);
COMMENT ON TABLE oauth_authorizations IS 'Authorization requests waiting for the dashboard user''s consent; removed when decided or expired.';

CREATE TABLE oauth_grants (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  agent_id uuid NOT NULL,
  client_id text NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
  client_name text NOT NULL,
  scopes text[] NOT NULL,
  resource text NOT NULL,
  granted_by text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz,
  FOREIGN KEY (workspace_id, agent_id) REFERENCES agents (workspace_id, id) ON DELETE CASCADE
);
COMMENT ON COLUMN oauth_grants.resource IS 'The MCP endpoint (RFC 8707 resource) the grant''s tokens are for: their audience.';
COMMENT ON COLUMN oauth_grants.granted_by IS 'The actor who consented: dashboard:<session id>.';
CREATE INDEX oauth_grants_page ON oauth_grants (workspace_id, created_at DESC, id DESC);

CREATE TABLE oauth_codes (
  code_hash text PRIMARY KEY,
  grant_id uuid NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
  code_challenge text NOT NULL,
  redirect_uri text NOT NULL,
  expires_at timestamptz NOT NULL
);
COMMENT ON TABLE oauth_codes IS 'Authorization codes, by SHA-256 (hex); a code is deleted when it is exchanged, so a replay finds nothing.';

CREATE TABLE oauth_tokens (
  token_hash text PRIMARY KEY,
  grant_id uuid NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind IN ('access', 'refresh')),
  expires_at timestamptz NOT NULL
);
COMMENT ON TABLE oauth_tokens IS 'Access and refresh tokens, by SHA-256 (hex); a refresh token is deleted when it is used (rotation).';
CREATE INDEX oauth_tokens_grant ON oauth_tokens (grant_id);
