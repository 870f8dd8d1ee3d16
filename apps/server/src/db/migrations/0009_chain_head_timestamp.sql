-- The sealer looks for unsealed events only from shortly before the last sealed event's
-- timestamp, instead of scanning the workspace's whole history on every round.
ALTER TABLE audit_chain_heads ADD COLUMN last_event_timestamp timestamptz;
