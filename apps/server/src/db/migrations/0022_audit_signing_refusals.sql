-- A workspace's audit tree that the checkpointer refused to sign: its head does not extend the
-- last checkpoint this signer signed (kept outside the database, in the checkpoint file and in
-- memory), so the history below it was rewritten, cut or forked. The row says so to every
-- process (GET /audit/verify answers valid: false, the compliance control fails, the metric
-- counts it); the signer writes it again each round it refuses, and deletes it once a head
-- extends its last checkpoint again (the database restored).
CREATE TABLE audit_signing_refusals (
  workspace_id uuid PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
  detected_at timestamptz NOT NULL DEFAULT now(),
  signed_size bigint NOT NULL,
  signed_root text NOT NULL,
  head_size bigint NOT NULL,
  head_root text NOT NULL,
  reason text NOT NULL
);
COMMENT ON COLUMN audit_signing_refusals.signed_size IS 'The size of the last checkpoint the signer signed for this log.';
COMMENT ON COLUMN audit_signing_refusals.signed_root IS 'Its root hash, hex.';
COMMENT ON COLUMN audit_signing_refusals.head_size IS 'The size of the tree head it refused to sign.';
COMMENT ON COLUMN audit_signing_refusals.head_root IS 'That head''s root hash, hex.';
COMMENT ON COLUMN audit_signing_refusals.reason IS 'Why: no consistency proof leads from the signed checkpoint to the head, the tree shrank, or a second root for a signed size.';
