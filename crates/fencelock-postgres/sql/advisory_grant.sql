-- The grant CTEs of advisory_acquire.sql and advisory_acquire_queued.sql, written into each
-- where it names them, after that statement's CTE `queue_clear (clear boolean)`, which says
-- whether the key's queue lets this try take the lock.
-- $1 lock id, $2 key, $3 owner, $4 ttl in microseconds, $5 idle_session_timeout in ms.
-- Takes the session advisory lock without waiting; only when granted, bumps the key's
-- counter, records the holder and arms idle_session_timeout so that the server ends this
-- session (freeing the lock) if the client goes silent for longer than the ttl.
-- The lock is tried only when the schema's lock mechanism (fencelock_bind_mechanism,
-- migration 9, recording 'advisory' when none is) is 'advisory'; `bound` returns it, so a
-- schema bound to leases is refused by the grant itself, whatever the client knew.
-- Every table written here is UNLOGGED: the commit waits for no WAL flush (DESIGN 5.3).
-- Same next-token rule (fencelock_issue_token, migration 18, the one writer of a counter a
-- client statement may call) and signals as lease_acquire.sql:
-- granted the lock but no token, with `live` NULL or `exhausted`, the caller unlocks, starts a
-- new epoch and tries again.
serves AS (
    SELECT {schema}.fencelock_bind_mechanism('advisory') AS bound
), live AS (
    SELECT e.epoch FROM {schema}.fencelock_epoch_live e WHERE e.one
), locked AS (
    SELECT CASE WHEN serves.bound = 'advisory' AND queue_clear.clear
                THEN pg_try_advisory_lock($1) ELSE false END
           AS got
      FROM serves, queue_clear
), counter AS (
    SELECT {schema}.fencelock_issue_token($2, false) AS last_token
      FROM locked, live WHERE locked.got
), holder AS (
    INSERT INTO {schema}.fencelock_advisory_holders AS h (key, lock_id, owner, token, pid, expires_at)
    SELECT $2, $1, $3, counter.last_token, pg_backend_pid(),
           clock_timestamp() + $4::float8 * interval '1 microsecond'
      FROM counter
     WHERE counter.last_token IS NOT NULL
    ON CONFLICT (key) DO UPDATE
        SET lock_id = EXCLUDED.lock_id,
            owner = EXCLUDED.owner,
            token = EXCLUDED.token,
            pid = EXCLUDED.pid,
            expires_at = EXCLUDED.expires_at
    RETURNING token
), plain AS (
    SELECT (SELECT got FROM locked) AS got,
           t.token,
           CASE WHEN t.token IS NOT NULL
                THEN set_config('idle_session_timeout', $5, false) END AS armed,
           (SELECT epoch FROM live) AS live,
           CASE WHEN t.token IS NULL THEN EXISTS (
               SELECT 1 FROM {schema}.fencelock_counters c, live
                WHERE c.key = $2 AND {schema}.fencelock_token_exhausted(c.last_token, live.epoch)
           ) ELSE false END AS exhausted,
           (SELECT bound FROM serves) AS bound
      FROM (SELECT (SELECT token FROM holder) AS token) t
)
