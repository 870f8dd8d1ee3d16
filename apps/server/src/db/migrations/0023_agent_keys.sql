-- Agent keys identify their agent in every workspace (docs/decisions/0017-agent-keys.md): a key
-- Warden generates is found by its public id, a caller-chosen one by its hash, now unique.
ALTER TABLE agents ADD COLUMN api_key_public_id text;
COMMENT ON COLUMN agents.api_key_public_id IS 'The public id of a key Warden generated (wak_<public id>_<secret>); NULL for a caller-chosen key or none.';
COMMENT ON COLUMN agents.api_key_hash IS 'SHA-256 (hex) of the whole agent key, unique across workspaces; ''duplicate:<agent id>'' for a key migration 0022 took from a later registration (matches nothing).';

-- A key registered by several agents stays with the first registration (the oldest; ties by
-- workspace and id); the later ones get a value no key hashes to, so a key stays demanded for
-- them and nothing matches it until they are given a new one (fail closed, not keyless).
UPDATE agents SET api_key_hash = 'duplicate:' || agents.id
FROM (
  SELECT workspace_id, id,
    row_number() OVER (PARTITION BY api_key_hash ORDER BY created_at, workspace_id, id) AS registration
  FROM agents
  WHERE api_key_hash IS NOT NULL
) AS ranked
WHERE agents.workspace_id = ranked.workspace_id AND agents.id = ranked.id AND ranked.registration > 1;

DROP INDEX agents_key_hash;
CREATE UNIQUE INDEX agents_key_hash ON agents (api_key_hash) WHERE api_key_hash IS NOT NULL;
CREATE UNIQUE INDEX agents_key_public_id ON agents (api_key_public_id) WHERE api_key_public_id IS NOT NULL;
