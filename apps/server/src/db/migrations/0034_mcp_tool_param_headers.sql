-- The Mcp-Param-* declarations of each MCP server's tools (`x-mcp-header` in their input
-- schemas, revision 2026-07-28), learned from the tool listings any server process relays, so
-- that every process checks a call's headers, not only the one that relayed the listing. A
-- declaration holds for the server's URL as it was listed: a new URL is another server.
CREATE TABLE mcp_tool_param_headers (
  workspace_id uuid NOT NULL,
  server_id uuid NOT NULL,
  tool text NOT NULL,
  transport_url text NOT NULL,
  declared jsonb NOT NULL,
  learned_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, server_id, tool),
  FOREIGN KEY (workspace_id, server_id) REFERENCES mcp_servers (workspace_id, id) ON DELETE CASCADE
);

COMMENT ON COLUMN mcp_tool_param_headers.declared IS 'Each argument that has a header, and the header''s name: {"region": "Region"}; {} for a tool that declares none';
