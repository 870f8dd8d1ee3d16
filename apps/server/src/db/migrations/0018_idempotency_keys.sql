-- Idempotency-Key on the v1 API's POSTs: the first answer to a key, kept 24 hours and replayed
-- to a retry of the same request. Scoped by workspace and API key (a key never sees another
-- key's answers); `request_hash` fingerprints the request (method, path, canonical body, agent
-- key). `status` is NULL while the first request runs; `locked_until` lets a retry take over
-- a request whose process died.
CREATE TABLE idempotency_keys (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  api_key_id uuid NOT NULL,
  idempotency_key text NOT NULL,
  request_hash text NOT NULL,
  status integer,
  response_body text,
  locked_until timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (workspace_id, api_key_id, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
