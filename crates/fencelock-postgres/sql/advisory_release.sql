-- Runs on the holding connection. $1 lock id, $2 key, $3 owner, $4 token.
-- Forgets the holder (the delete trigger notifies waiters), unlocks, and disarms
-- idle_session_timeout so the connection can go back to the pool.
-- The commit does not wait for its WAL flush (synchronous_commit off for this transaction
-- only): the holder row only counts while its session holds the lock, and tokens live in
-- fencelock_counters, which release never touches.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS off
), forgotten AS (
    DELETE FROM {schema}.fencelock_advisory_holders
     WHERE key = $2 AND owner = $3 AND token = $4 AND pid = pg_backend_pid()
    RETURNING 1
)
SELECT (SELECT off FROM async_commit) IS NOT NULL AND pg_advisory_unlock($1) AS unlocked,
       EXISTS (SELECT 1 FROM forgotten) AS forgotten,
       set_config('idle_session_timeout', '0', false) AS disarmed
