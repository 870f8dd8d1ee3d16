-- A workspace may publish its audit log: anyone may then follow it as C2SP tlog-tiles at
-- /api/v1/audit/logs/<workspace id>/ without a key (monitors, mirrors, witnesses of their own).
ALTER TABLE workspace_settings ADD COLUMN audit_log_public boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN workspace_settings.audit_log_public IS 'Whether the audit log is served as tlog-tiles without a key, at /api/v1/audit/logs/<workspace id>/.';
