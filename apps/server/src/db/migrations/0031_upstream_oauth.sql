-- OAuth connections to upstream MCP servers (docs/decisions/0027-upstream-oauth-connections.md):
-- an admin connects once (authorization code with PKCE at the upstream's authorization server),
-- for the workspace or for one agent; Warden keeps the tokens sealed with the master key and
-- refreshes them. Agents never hold them.

-- A third kind of upstream auth: 'oauth' (Authorization: Bearer <a connection's access token>).
ALTER TABLE mcp_servers
  DROP CONSTRAINT mcp_servers_auth_complete,
  DROP CONSTRAINT mcp_servers_auth_type_check,
  ADD CONSTRAINT mcp_servers_auth_type_check CHECK (auth_type IN ('bearer', 'header', 'oauth')),
  ADD CONSTRAINT mcp_servers_auth_complete CHECK (
    (auth_type IS NULL AND auth_header IS NULL AND auth_secret_encrypted IS NULL AND auth_hint IS NULL)
    OR (auth_type IN ('bearer', 'header') AND auth_header IS NOT NULL AND auth_secret_encrypted IS NOT NULL AND auth_hint IS NOT NULL)
    OR (auth_type = 'oauth' AND auth_header = 'authorization' AND auth_secret_encrypted IS NULL AND auth_hint IS NULL)
  );

-- Connection generations never repeat, even across a server switched away from OAuth and back:
-- an access token kept in memory under one is never served for another connection.
CREATE SEQUENCE mcp_server_oauth_generation;

-- Per server: the configuration (as the admin gave it) and what the last connect found.
CREATE TABLE mcp_server_oauth (
  workspace_id uuid NOT NULL,
  server_id uuid NOT NULL,
  authorization_server text,
  scopes text[] NOT NULL DEFAULT '{}',
  client_id text,
  client_secret_encrypted text,
  client_registered boolean NOT NULL DEFAULT false,
  issuer text,
  metadata jsonb,
  resource text,
  generation bigint NOT NULL DEFAULT nextval('mcp_server_oauth_generation'),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, server_id),
  FOREIGN KEY (workspace_id, server_id) REFERENCES mcp_servers (workspace_id, id) ON DELETE CASCADE
);
COMMENT ON COLUMN mcp_server_oauth.authorization_server IS 'The issuer the admin named; NULL: found from the server''s Protected Resource Metadata (RFC 9728).';
COMMENT ON COLUMN mcp_server_oauth.client_id IS 'The client Warden is at the authorization server: given by the admin, or registered by Warden at the last connect (client_registered).';
COMMENT ON COLUMN mcp_server_oauth.client_secret_encrypted IS 'A confidential client''s secret, sealed with the master key; never returned.';
COMMENT ON COLUMN mcp_server_oauth.issuer IS 'The authorization server of the last connect (its metadata''s issuer).';
COMMENT ON COLUMN mcp_server_oauth.metadata IS 'The authorization server''s RFC 8414 metadata as read at the last connect (endpoints for refresh and revocation).';
COMMENT ON COLUMN mcp_server_oauth.resource IS 'The resource indicator (RFC 8707) tokens are asked for: the server''s URL, or its metadata''s resource.';
COMMENT ON COLUMN mcp_server_oauth.generation IS 'Renewed (from a sequence) by every connect, disconnect and change of configuration or URL: part of the upstream session pool key and of the in-memory token cache''s.';

-- The connections: the workspace's (agent_id NULL) and each agent's own. No row: not connected.
CREATE TABLE mcp_server_oauth_grants (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL,
  server_id uuid NOT NULL,
  agent_id uuid,
  issuer text NOT NULL,
  metadata jsonb NOT NULL,
  resource text NOT NULL,
  client_id text NOT NULL,
  client_secret_encrypted text,
  access_token_encrypted text,
  refresh_token_encrypted text,
  expires_at timestamptz,
  refresh_after timestamptz,
  refresh_lease_until timestamptz,
  status text NOT NULL CHECK (status IN ('connected', 'reauthorization_required')),
  status_detail text,
  connected_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (workspace_id, server_id) REFERENCES mcp_server_oauth (workspace_id, server_id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, agent_id) REFERENCES agents (workspace_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX mcp_server_oauth_grants_workspace ON mcp_server_oauth_grants (workspace_id, server_id) WHERE agent_id IS NULL;
CREATE UNIQUE INDEX mcp_server_oauth_grants_agent ON mcp_server_oauth_grants (workspace_id, server_id, agent_id) WHERE agent_id IS NOT NULL;
COMMENT ON COLUMN mcp_server_oauth_grants.agent_id IS 'The agent this connection acts for; NULL: every agent of the workspace without one of its own.';
COMMENT ON COLUMN mcp_server_oauth_grants.issuer IS 'The authorization server that issued the tokens: refreshes and revocation go to its endpoints (metadata), whatever a later connect finds.';
COMMENT ON COLUMN mcp_server_oauth_grants.client_id IS 'The client the tokens were issued to (refreshes use it, whatever the server''s registration later becomes).';
COMMENT ON COLUMN mcp_server_oauth_grants.access_token_encrypted IS 'The current access token, sealed with the master key; never returned. NULL once a refresh was refused.';
COMMENT ON COLUMN mcp_server_oauth_grants.refresh_token_encrypted IS 'The current refresh token, sealed; replaced when the authorization server rotates it.';
COMMENT ON COLUMN mcp_server_oauth_grants.refresh_after IS 'When Warden refreshes the access token: a minute before it expires, or halfway through a shorter life.';
COMMENT ON COLUMN mcp_server_oauth_grants.refresh_lease_until IS 'Set by the one process refreshing the tokens (others wait for its result): a rotated refresh token is never used twice.';
COMMENT ON COLUMN mcp_server_oauth_grants.status_detail IS 'Why the connection needs an admin (the authorization server''s error code), never a token.';

-- Authorizations under way, in two stages, ten minutes each: 'authorizing' (keyed by the OAuth
-- state, the only key the callback has; one use), then 'confirming' (keyed by a new secret the
-- callback hands the browser: the tokens wait there until a dashboard session of the workspace
-- confirms, so that a person lured into consenting cannot connect someone else's workspace).
CREATE TABLE mcp_server_oauth_pending (
  state_hash text PRIMARY KEY,
  stage text NOT NULL DEFAULT 'authorizing' CHECK (stage IN ('authorizing', 'confirming')),
  workspace_id uuid NOT NULL,
  server_id uuid NOT NULL,
  agent_id uuid,
  issuer text NOT NULL,
  metadata jsonb NOT NULL,
  resource text NOT NULL,
  client_id text NOT NULL,
  client_secret_encrypted text,
  code_verifier_encrypted text NOT NULL,
  redirect_uri text NOT NULL,
  access_token_encrypted text,
  refresh_token_encrypted text,
  expires_in integer,
  scope text,
  actor jsonb NOT NULL,
  expires_at timestamptz NOT NULL,
  FOREIGN KEY (workspace_id, server_id) REFERENCES mcp_server_oauth (workspace_id, server_id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, agent_id) REFERENCES agents (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX mcp_server_oauth_pending_expiry ON mcp_server_oauth_pending (expires_at);
COMMENT ON COLUMN mcp_server_oauth_pending.state_hash IS 'SHA-256 of the OAuth state sent to the authorization server (authorizing), or of the confirmation id (confirming); neither is kept.';
COMMENT ON COLUMN mcp_server_oauth_pending.access_token_encrypted IS 'Confirming: the tokens the code was exchanged for, sealed, until a dashboard session of the workspace confirms.';
COMMENT ON COLUMN mcp_server_oauth_pending.agent_id IS 'The agent the connection is for; NULL: the workspace''s.';
COMMENT ON COLUMN mcp_server_oauth_pending.issuer IS 'The authorization server asked, its metadata and client: the code goes back to that one, whatever was configured since.';
COMMENT ON COLUMN mcp_server_oauth_pending.code_verifier_encrypted IS 'The PKCE verifier (RFC 7636), sealed with the master key.';
COMMENT ON COLUMN mcp_server_oauth_pending.actor IS 'Who asked to connect: the connected event is recorded in their name.';
