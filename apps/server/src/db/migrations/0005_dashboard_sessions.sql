-- Dashboard sessions: the cookie holds a random token; only its SHA-256 is stored. The
-- session acts with the permissions of the API key that opened it, re-read on every request,
-- so revoking the key ends the session.
CREATE TABLE dashboard_sessions (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  token_hash text NOT NULL UNIQUE,
  key_id uuid NOT NULL,
  csrf_token text NOT NULL,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  FOREIGN KEY (workspace_id, key_id) REFERENCES api_keys (workspace_id, id) ON DELETE CASCADE
);
