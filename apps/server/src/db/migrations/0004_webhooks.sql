-- Webhook endpoints (managed in the dashboard and the CLI) and their deliveries.
-- Secrets are stored encrypted (AES-256-GCM under the master key), never in plaintext.

ALTER TABLE outbox_events ADD COLUMN dispatched_at timestamptz;
CREATE INDEX outbox_events_undispatched ON outbox_events (created_at) WHERE dispatched_at IS NULL;

CREATE TABLE webhook_endpoints (
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  url text NOT NULL,
  description text,
  events text[] NOT NULL,
  paused boolean NOT NULL DEFAULT false,
  -- set when the receiver answered 410 Gone: no more deliveries until re-enabled
  disabled_at timestamptz,
  secret_encrypted text NOT NULL,
  -- after a rotation, the previous secret also signs until it expires (overlap window)
  previous_secret_encrypted text,
  previous_secret_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id)
);

CREATE TABLE webhook_deliveries (
  workspace_id uuid NOT NULL,
  id uuid NOT NULL,
  endpoint_id uuid NOT NULL,
  event_id uuid NOT NULL,
  event_type text NOT NULL,
  -- pending → succeeded | failed; skipped when the endpoint was paused (replayable)
  status text NOT NULL,
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  locked_until timestamptz,
  last_attempt_at timestamptz,
  response_status integer,
  response_body text,
  last_error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, id),
  FOREIGN KEY (workspace_id, endpoint_id) REFERENCES webhook_endpoints (workspace_id, id) ON DELETE CASCADE,
  FOREIGN KEY (workspace_id, event_id) REFERENCES outbox_events (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_page ON webhook_deliveries (workspace_id, endpoint_id, created_at DESC, id DESC);
