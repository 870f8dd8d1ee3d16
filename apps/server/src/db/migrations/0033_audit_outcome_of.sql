-- An act's outcome event names its decision event (context.decision_event_id): the audit log's
-- acts view (GET /audit-logs?view=acts) finds a page's outcomes, and filters acts by how they
-- ended, through this index instead of reading the workspace's whole log.
CREATE INDEX audit_events_outcome_of ON audit_events (workspace_id, (context->>'decision_event_id'))
  WHERE context ? 'decision_event_id';
