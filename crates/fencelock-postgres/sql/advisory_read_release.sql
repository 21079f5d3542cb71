-- Runs on the reader's holding connection. $1 lock id, $2 key, $3 reader id, $4 phase owner,
-- $5 phase token.
-- Forgets the reader (the delete trigger wakes a waiter of the key), gives the shared lock
-- back, and disarms idle_session_timeout so the connection can go back to the pool.
-- The commit does not wait for its WAL flush (synchronous_commit off for this transaction
-- only): a reader row only counts while its session holds the shared lock, and tokens live
-- in fencelock_counters, which release never touches.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS off
), forgotten AS (
    DELETE FROM {schema}.fencelock_advisory_readers
     WHERE key = $2 AND reader = $3 AND owner = $4 AND token = $5 AND pid = pg_backend_pid()
    RETURNING 1
)
SELECT (SELECT off FROM async_commit) IS NOT NULL AND pg_advisory_unlock_shared($1) AS unlocked,
       EXISTS (SELECT 1 FROM forgotten) AS forgotten,
       set_config('idle_session_timeout', '0', false) AS disarmed
