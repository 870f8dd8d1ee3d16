-- Witness cosignatures that came after their checkpoint was stored: a witness down or slow when
-- the checkpoint was signed cosigns it once it is back, without waiting for the log to grow.
-- The note as served is the stored note (immutable) followed by these lines. Append-only.
CREATE TABLE audit_late_cosignatures (
  workspace_id uuid NOT NULL,
  tree_size bigint NOT NULL CHECK (tree_size > 0),
  witness text NOT NULL,
  line text NOT NULL,
  cosigned_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, tree_size, witness)
);
CREATE TRIGGER audit_late_cosignatures_immutable BEFORE UPDATE OR DELETE ON audit_late_cosignatures
  FOR EACH ROW EXECUTE FUNCTION refuse_audit_change();
CREATE TRIGGER audit_late_cosignatures_no_truncate BEFORE TRUNCATE ON audit_late_cosignatures
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

COMMENT ON COLUMN audit_late_cosignatures.witness IS 'The witness key that cosigned, `<name>+<hex key id>`.';
COMMENT ON COLUMN audit_late_cosignatures.line IS 'Its signature line on the checkpoint, `— <name> <base64>` and a newline, verified with its key before it was stored.';
