-- Servers cache the identity of API keys (see http/key-cache.ts). Any change to a key or to
-- its workspace row (revocation, permissions, rate limit, policy and agent versions) is
-- announced on `warden_identity` with the workspace id; NOTIFY is delivered at commit, and
-- several notifications of one transaction with the same payload are folded into one.
CREATE FUNCTION notify_identity_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'workspaces' THEN
    PERFORM pg_notify('warden_identity', COALESCE(NEW.id, OLD.id)::text);
  ELSE
    PERFORM pg_notify('warden_identity', COALESCE(NEW.workspace_id, OLD.workspace_id)::text);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER api_keys_notify_identity AFTER UPDATE OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION notify_identity_change();

CREATE TRIGGER workspaces_notify_identity AFTER UPDATE OR DELETE ON workspaces
  FOR EACH ROW EXECUTE FUNCTION notify_identity_change();
