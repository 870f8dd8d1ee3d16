-- What a task of the MCP tasks extension (revision 2026-07-28) asked its client meanwhile: each
-- input request the upstream named is decided once for the task's agent, as any question an
-- upstream asks is, and only an allowed one is shown to the client or answered upstream.
ALTER TABLE mcp_gateway_tasks ADD COLUMN input_decisions jsonb NOT NULL DEFAULT '{}';

COMMENT ON COLUMN mcp_gateway_tasks.input_decisions IS 'Each input request key the upstream named, and how it was decided: {"confirm": {"allowed": true}} or {"confirm": {"allowed": false, "message": "..."}}';
