-- Decisions: policy-set versions for cache invalidation, immutable audit events and the
-- per-workspace hash chain that seals them.

-- Every change to a workspace's policies bumps its policy_version, in the same transaction,
-- whoever writes. Servers cache compiled policy sets by this version and read it with the
-- caller's key on every request, so a change is seen by every process at its next request.
ALTER TABLE workspaces ADD COLUMN policy_version bigint NOT NULL DEFAULT 0;

CREATE FUNCTION bump_policy_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE workspaces SET policy_version = policy_version + 1
   WHERE id = COALESCE(NEW.workspace_id, OLD.workspace_id);
  RETURN NULL;
END $$;

CREATE TRIGGER policies_bump_version AFTER INSERT OR UPDATE OR DELETE ON policies
  FOR EACH ROW EXECUTE FUNCTION bump_policy_version();

-- Audit events and their seals are append-only: the database itself refuses to change or
-- remove them (retention detaches and drops whole partitions, which these triggers allow).
CREATE FUNCTION refuse_audit_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit records are immutable: % on % refused', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE TRIGGER audit_events_immutable BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION refuse_audit_change();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

-- The chain: events are sealed shortly after they are written, in batches, by whichever
-- server process holds the workspace's chain head (row lock). seal.hash =
-- sha256(previous seal's hash || canonical event). Sealing off the request path keeps
-- evaluation throughput independent of the chain: requests only insert their event.
CREATE TABLE audit_chain_heads (
  workspace_id uuid PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
  last_sequence bigint NOT NULL DEFAULT 0,
  last_hash text NOT NULL DEFAULT ''
);

CREATE TABLE audit_seals (
  workspace_id uuid NOT NULL,
  sequence bigint NOT NULL,
  event_id uuid NOT NULL,
  event_timestamp timestamptz NOT NULL,
  hash text NOT NULL,
  sealed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, sequence),
  UNIQUE (workspace_id, event_id)
);

CREATE TRIGGER audit_seals_immutable BEFORE UPDATE OR DELETE ON audit_seals
  FOR EACH ROW EXECUTE FUNCTION refuse_audit_change();
CREATE TRIGGER audit_seals_no_truncate BEFORE TRUNCATE ON audit_seals
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

CREATE INDEX approvals_status ON approvals (workspace_id, status, created_at DESC, id DESC);
