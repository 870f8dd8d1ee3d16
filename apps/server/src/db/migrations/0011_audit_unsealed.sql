-- Events waiting for their seal. Each is queued by the statement that inserts it and removed by
-- the transaction that seals it, so the sealer reads this short queue instead of anti-joining a
-- workspace's events against their seals on every round (which grew with the audit history).
CREATE TABLE audit_unsealed (
  workspace_id uuid NOT NULL,
  event_timestamp timestamptz NOT NULL,
  event_id uuid NOT NULL,
  PRIMARY KEY (workspace_id, event_timestamp, event_id)
);

INSERT INTO audit_unsealed (workspace_id, event_timestamp, event_id)
SELECT e.workspace_id, e.event_timestamp, e.id
FROM audit_events e
LEFT JOIN audit_seals s ON s.workspace_id = e.workspace_id AND s.event_id = e.id
WHERE s.event_id IS NULL;

-- Was meant to bound the anti-join's scan; the queue replaces it.
ALTER TABLE audit_chain_heads DROP COLUMN last_event_timestamp;
