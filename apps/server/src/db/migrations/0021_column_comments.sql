-- Column comments: tools/db-schema.ts copies them into apps/server/src/db/schema.ts (generated
-- from the migrated database) as the columns' documentation. Only what the column's name, type
-- and default do not already say.
COMMENT ON COLUMN audit_tree_heads.tree_size IS 'Leaves in the workspace''s Merkle tree (RFC 9162); 0: the empty tree.';
COMMENT ON COLUMN audit_tree_heads.root_hash IS 'The tree''s root, hex. Default: SHA-256 of nothing, the root of the empty tree.';
COMMENT ON COLUMN audit_tree_nodes.level IS '(level, node_index) is the complete subtree over leaves [node_index·2^level, (node_index+1)·2^level).';
COMMENT ON COLUMN audit_tree_nodes.node_index IS '(level, node_index) is the complete subtree over leaves [node_index·2^level, (node_index+1)·2^level).';
COMMENT ON COLUMN audit_tree_nodes.hash IS 'The subtree''s hash, hex.';
COMMENT ON COLUMN audit_verifications.frontier IS 'The tree''s right edge at tree_size: the hex hashes of its compact range, a JSON array.';
COMMENT ON COLUMN audit_verifications.rechecked_to IS 'How far the rolling re-check of older events has come (it wraps around).';
