-- MCP tasks created through the gateway. An upstream task lives in the upstream session that
-- created it, so each task gets an upstream session of its own (opened by the task-augmented
-- tools/call, never pooled) and the row is what any server process needs to reach it again:
-- the session's id and protocol version, the URL it was opened at (a registry change of the URL
-- ends the task's reach), and the upstream's task id behind the id Warden gave the client. The
-- session is terminated (DELETE) once the task expires. `outcome_basis` is what the audit event
-- of the task's end repeats of the decision that allowed it; `finished_at` marks that event
-- written (once, by whichever request first sees the task end). A row is reserved (its
-- upstream columns NULL) before the call is decided, under a per-agent advisory lock that
-- counts the agent's live tasks, so concurrent calls cannot exceed the cap.
CREATE TABLE mcp_gateway_tasks (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  agent_id uuid NOT NULL,
  server_id uuid NOT NULL,
  upstream_url text NOT NULL,
  upstream_session_id text,
  protocol_version text,
  upstream_task_id text,
  outcome_basis jsonb,
  finished_at timestamptz,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  FOREIGN KEY (workspace_id, server_id) REFERENCES mcp_servers (workspace_id, id) ON DELETE CASCADE
);
-- live tasks per agent (the cap on them), and the expiry sweep
CREATE INDEX mcp_gateway_tasks_agent ON mcp_gateway_tasks (workspace_id, agent_id, expires_at);
CREATE INDEX mcp_gateway_tasks_expiry ON mcp_gateway_tasks (expires_at);
