-- Like policy_version: every change to a workspace's agents bumps agents_version in the same
-- transaction, and servers read it with the caller's key, so agent lookups can be cached per
-- version with no extra query and no stale answer.
ALTER TABLE workspaces ADD COLUMN agents_version bigint NOT NULL DEFAULT 0;

CREATE FUNCTION bump_agents_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE workspaces SET agents_version = agents_version + 1
   WHERE id = COALESCE(NEW.workspace_id, OLD.workspace_id);
  RETURN NULL;
END $$;

CREATE TRIGGER agents_bump_version AFTER INSERT OR UPDATE OR DELETE ON agents
  FOR EACH ROW EXECUTE FUNCTION bump_agents_version();
