-- Pagination cursors carry millisecond timestamps (what JavaScript dates hold), so the
-- timestamps that order pages must have millisecond precision too: with microseconds, rows
-- created in the same millisecond as a page's last row would be skipped. Ties are broken
-- by id.
UPDATE agents SET created_at = date_trunc('milliseconds', created_at);
UPDATE policies SET created_at = date_trunc('milliseconds', created_at);
UPDATE mcp_servers SET created_at = date_trunc('milliseconds', created_at);
UPDATE approvals SET created_at = date_trunc('milliseconds', created_at);
UPDATE webhook_endpoints SET created_at = date_trunc('milliseconds', created_at);
UPDATE webhook_deliveries SET created_at = date_trunc('milliseconds', created_at);
ALTER TABLE agents ALTER COLUMN created_at SET DEFAULT date_trunc('milliseconds', now());
ALTER TABLE policies ALTER COLUMN created_at SET DEFAULT date_trunc('milliseconds', now());
ALTER TABLE mcp_servers ALTER COLUMN created_at SET DEFAULT date_trunc('milliseconds', now());
ALTER TABLE approvals ALTER COLUMN created_at SET DEFAULT date_trunc('milliseconds', now());
ALTER TABLE webhook_endpoints ALTER COLUMN created_at SET DEFAULT date_trunc('milliseconds', now());
ALTER TABLE webhook_deliveries ALTER COLUMN created_at SET DEFAULT date_trunc('milliseconds', now());

-- TRUNCATE triggers are not inherited by partitions: refuse it on each partition too
-- (ensureAuditPartitions adds the same trigger to every partition it creates).
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events_default
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();
