-- A used refresh token is kept, marked, until it expires, so that its reuse is recognised
-- (OAuth 2.1 §4.3.1, RFC 9700 §4.14.2): a rotated refresh token presented again means it was
-- copied, and the grant is revoked with every token it issued.
ALTER TABLE oauth_tokens ADD COLUMN used_at timestamptz;
COMMENT ON COLUMN oauth_tokens.used_at IS 'When a refresh token was used (rotated); presented again, its grant is revoked. Null for access tokens.';
COMMENT ON TABLE oauth_tokens IS 'Access and refresh tokens, by SHA-256 (hex); a used refresh token stays, marked used_at, until it expires.';
