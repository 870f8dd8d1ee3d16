-- audit_events_page held the primary key's columns (workspace_id, event_timestamp, id) in the
-- opposite direction; PostgreSQL scans the primary key backwards for newest-first pages just
-- as well. Every decision inserted into both: one index less on the hot path's insert.
DROP INDEX IF EXISTS audit_events_page;
