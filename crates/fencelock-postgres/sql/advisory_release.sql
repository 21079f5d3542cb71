-- Runs on the holding connection. $1 lock id, $2 key, $3 owner, $4 token.
-- Forgets the holder (the delete trigger notifies waiters), unlocks, and disarms
-- idle_session_timeout so the connection can go back to the pool.
WITH forgotten AS (
    DELETE FROM fencelock_advisory_holders
     WHERE key = $2 AND owner = $3 AND token = $4 AND pid = pg_backend_pid()
    RETURNING 1
)
SELECT pg_advisory_unlock($1) AS unlocked,
       EXISTS (SELECT 1 FROM forgotten) AS forgotten,
       set_config('idle_session_timeout', '0', false) AS disarmed
