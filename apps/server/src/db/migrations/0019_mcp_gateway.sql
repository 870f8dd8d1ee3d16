-- The MCP gateway accepts an agent's own key as the bearer token, so it looks agents up by key
-- across workspaces; and a retried MCP tool call finds the approval it already asked for by
-- the digest of its act.
CREATE INDEX agents_key_hash ON agents (api_key_hash) WHERE api_key_hash IS NOT NULL;
CREATE INDEX approvals_act ON approvals (workspace_id, input_digest) WHERE input_digest IS NOT NULL;

-- Like agents_version: every change to a workspace's MCP servers bumps mcp_servers_version in
-- the same transaction (and, through the workspace row, notifies `warden_identity`); servers
-- read it with the caller's key and cache the registry per version (execution/mcp-registry.ts).
ALTER TABLE workspaces ADD COLUMN mcp_servers_version bigint NOT NULL DEFAULT 0;

CREATE FUNCTION bump_mcp_servers_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE workspaces SET mcp_servers_version = mcp_servers_version + 1
   WHERE id = COALESCE(NEW.workspace_id, OLD.workspace_id);
  RETURN NULL;
END $$;

CREATE TRIGGER mcp_servers_bump_version AFTER INSERT OR UPDATE OR DELETE ON mcp_servers
  FOR EACH ROW EXECUTE FUNCTION bump_mcp_servers_version();
