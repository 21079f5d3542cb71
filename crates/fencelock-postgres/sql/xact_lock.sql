-- Inside the caller's transaction. $1 lock id, $2 lock_timeout setting.
-- Bounds the wait with a transaction-local lock_timeout, then waits for the transaction-level
-- advisory lock, released with the transaction. The token is taken afterwards, outside this
-- transaction (token_grant.sql).
WITH bounded AS (
    SELECT set_config('lock_timeout', $2, true) AS lock_timeout
)
SELECT bounded.lock_timeout, pg_advisory_xact_lock($1)::text AS locked
  FROM bounded
