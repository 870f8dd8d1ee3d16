-- Webhook claims take each endpoint's oldest due deliveries (workspaces in turn, see
-- delivery-worker.ts): one index range per endpoint.
CREATE INDEX webhook_deliveries_due_by_endpoint ON webhook_deliveries (workspace_id, endpoint_id, next_attempt_at)
  WHERE status = 'pending';

-- Key listings show `wk_` and 4 characters of a key (workspaces.service.ts displayPrefix);
-- keys stored before kept 8, most of a short bootstrap key.
UPDATE api_keys SET prefix = left(prefix, 7) WHERE length(prefix) > 7;

-- Each dashboard login deletes expired sessions and a key's sessions beyond its newest few.
CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);
CREATE INDEX dashboard_sessions_of_key ON dashboard_sessions (workspace_id, key_id, created_at);
