-- Rate-limit counters shared by every server process on this database (rate-limiter-flexible's
-- Postgres store; used when DATABASE_URL is set and REDIS_URL is not). Keys name API keys or
-- client addresses, not tenants' data, so the table is global.
CREATE TABLE rate_limits (
  key varchar(255) PRIMARY KEY,
  points integer NOT NULL DEFAULT 0,
  expire bigint
);
