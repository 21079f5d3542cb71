-- Inside the caller's transaction. $1 lock id, $2 key.
-- Waits for the transaction-level advisory lock (bounded by lock_timeout), then bumps the
-- key's counter. Both are released / committed with the transaction.
WITH locked AS (
    SELECT pg_advisory_xact_lock($1)
)
INSERT INTO {schema}.fencelock_counters AS c (key, last_token)
SELECT $2, 1 FROM locked
ON CONFLICT (key) DO UPDATE SET last_token = c.last_token + 1
RETURNING last_token
