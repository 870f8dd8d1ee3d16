-- Governed MCP sessions. The row is the session (any server process can serve it); the
-- upstream connection is an in-process cache keyed by the session id, opened again by a
-- process that does not hold one, so no client affinity is needed.
CREATE TABLE mcp_sessions (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  server_id uuid NOT NULL,
  agent_id uuid NOT NULL,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  FOREIGN KEY (workspace_id, server_id) REFERENCES mcp_servers (workspace_id, id) ON DELETE CASCADE
);
