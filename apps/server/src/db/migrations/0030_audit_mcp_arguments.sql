-- What the audit log keeps of an MCP act's arguments (docs/decisions/0026-audited-mcp-arguments.md):
-- 'redacted' (the arguments, secret-looking values redacted, up to 8 KiB) or 'digest' (their
-- SHA-256 only, as before). Its change bumps policy_version through the table's trigger, so every
-- server process reads it with the policy set.
ALTER TABLE workspace_settings
  ADD COLUMN audit_mcp_arguments text NOT NULL DEFAULT 'redacted' CHECK (audit_mcp_arguments IN ('redacted', 'digest'));
COMMENT ON COLUMN workspace_settings.audit_mcp_arguments IS '''redacted'': audit events keep MCP arguments with secret-looking values redacted (up to 8 KiB); ''digest'': their SHA-256 only.';
