-- The audit log becomes a Merkle tree per workspace (RFC 9162 hashing) with signed checkpoints
-- (docs/decisions/0011-audit-merkle-tree.md).
--
-- audit_seals keeps one row per sealed event: sequence = leaf index + 1, hash = the event's leaf
-- hash. audit_tree_nodes holds the hashes of the complete aligned subtrees above the leaves
-- (level k, index j covers leaves [j·2^k, (j+1)·2^k)), so any root or proof is read from
-- O(log n) rows. audit_tree_heads replaces audit_chain_heads: the tree's size and root.
--
-- Events sealed into the old hash chain are queued again and appended to the tree in their
-- queue order (event time): the chain's hashes were never held outside the database, so
-- nothing outside refers to them.

CREATE TABLE audit_tree_heads (
  workspace_id uuid PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
  tree_size bigint NOT NULL DEFAULT 0,
  root_hash text NOT NULL DEFAULT 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
);

INSERT INTO audit_unsealed (workspace_id, event_timestamp, event_id)
SELECT workspace_id, event_timestamp, event_id FROM audit_seals
ON CONFLICT DO NOTHING;

ALTER TABLE audit_seals DISABLE TRIGGER audit_seals_no_truncate;
TRUNCATE audit_seals;
ALTER TABLE audit_seals ENABLE TRIGGER audit_seals_no_truncate;
DROP TABLE audit_chain_heads;

CREATE TABLE audit_tree_nodes (
  workspace_id uuid NOT NULL,
  level smallint NOT NULL CHECK (level BETWEEN 1 AND 62),
  node_index bigint NOT NULL CHECK (node_index >= 0),
  hash text NOT NULL,
  PRIMARY KEY (workspace_id, level, node_index)
);
CREATE TRIGGER audit_tree_nodes_immutable BEFORE UPDATE OR DELETE ON audit_tree_nodes
  FOR EACH ROW EXECUTE FUNCTION refuse_audit_change();
CREATE TRIGGER audit_tree_nodes_no_truncate BEFORE TRUNCATE ON audit_tree_nodes
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

-- Signed checkpoints (C2SP tlog-checkpoint notes). Copies leave the database as webhooks and in
-- the checkpoint file; these rows serve the API's proofs.
CREATE TABLE audit_checkpoints (
  workspace_id uuid NOT NULL,
  tree_size bigint NOT NULL CHECK (tree_size > 0),
  root_hash text NOT NULL,
  checkpoint_timestamp timestamptz NOT NULL,
  key_id text NOT NULL,
  note text NOT NULL,
  PRIMARY KEY (workspace_id, tree_size)
);
CREATE TRIGGER audit_checkpoints_immutable BEFORE UPDATE OR DELETE ON audit_checkpoints
  FOR EACH ROW EXECUTE FUNCTION refuse_audit_change();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

-- Where the last verification of each workspace's tree ended: the size it reached and the tree's
-- right edge there (hex hashes of the compact range), so the next one reads only newer events;
-- and how far the rolling re-check of older events has come (it wraps around).
CREATE TABLE audit_verifications (
  workspace_id uuid PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
  tree_size bigint NOT NULL,
  frontier jsonb NOT NULL,
  rechecked_to bigint NOT NULL DEFAULT 0,
  verified_at timestamptz NOT NULL
);
