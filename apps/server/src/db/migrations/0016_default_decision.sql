-- Workspace settings of the decision engine: the default decision per agent environment for
-- an act that no rule of an enforcing policy matches. A workspace without a row (every
-- existing one) allows by default everywhere, as before.
CREATE TABLE workspace_settings (
  workspace_id uuid PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
  default_development text NOT NULL DEFAULT 'allow' CHECK (default_development IN ('allow', 'block')),
  default_staging text NOT NULL DEFAULT 'allow' CHECK (default_staging IN ('allow', 'block')),
  default_production text NOT NULL DEFAULT 'allow' CHECK (default_production IN ('allow', 'block')),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- The defaults are compiled into the workspace's policy set, which servers cache by
-- policy_version: a change bumps it in the same transaction, exactly as a policy change does
-- (and the bump of the workspaces row is announced by workspaces_notify_identity).
CREATE TRIGGER workspace_settings_bump_version AFTER INSERT OR UPDATE OR DELETE ON workspace_settings
  FOR EACH ROW EXECUTE FUNCTION bump_policy_version();
