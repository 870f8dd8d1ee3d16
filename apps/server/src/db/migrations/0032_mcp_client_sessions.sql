-- Client sessions of the MCP gateway (Mcp-Session-Id): what a client declared at initialize,
-- kept so that any server process serves the session's requests. A session belongs to one
-- agent and one endpoint (`endpoint`: the server's slug, '' for the aggregate /mcp); its id is
-- not a credential (every request is authenticated on its own) but names whose upstream
-- sessions a request uses and which capabilities Warden declares to those upstreams.
-- `last_seen_at` is moved at most once a minute; idle sessions are swept, and an agent keeps at
-- most a fixed number (opening one more ends its least recently seen).
CREATE TABLE mcp_client_sessions (
  id text PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  agent_id uuid NOT NULL,
  endpoint text NOT NULL,
  capabilities jsonb NOT NULL,
  protocol_version text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (workspace_id, agent_id) REFERENCES agents (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX mcp_client_sessions_idle ON mcp_client_sessions (last_seen_at);
-- an agent's sessions, newest first (the cap on them)
CREATE INDEX mcp_client_sessions_agent ON mcp_client_sessions (workspace_id, agent_id, last_seen_at DESC);

COMMENT ON COLUMN mcp_client_sessions.capabilities IS 'The client capabilities Warden relays (sampling, elicitation, roots) as the client declared them';

-- Messages between server processes for the MCP gateway's relay: a client's answer to a question
-- another process relayed, a message for a GET stream another process holds. Small ones travel
-- in the NOTIFY payload itself; a row carries one too large for it (8000 bytes), read and deleted
-- by the process it was for, or swept when nobody was.
CREATE TABLE mcp_relay_messages (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  payload jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
