-- Runs on the connection that will hold the lease.
-- $1 lock id, $2 key, $3 owner, $4 ttl in microseconds, $5 idle_session_timeout in ms.
-- Takes the session advisory lock without waiting; only when granted, bumps the key's
-- counter, records the holder and arms idle_session_timeout so that the server ends this
-- session (freeing the lock) if the client goes silent for longer than the ttl.
WITH locked AS (
    SELECT pg_try_advisory_lock($1) AS got
), counter AS (
    INSERT INTO {schema}.fencelock_counters AS c (key, last_token)
    SELECT $2, 1 FROM locked WHERE got
    ON CONFLICT (key) DO UPDATE SET last_token = c.last_token + 1
    RETURNING last_token
), holder AS (
    INSERT INTO {schema}.fencelock_advisory_holders AS h (key, lock_id, owner, token, pid, expires_at)
    SELECT $2, $1, $3, counter.last_token, pg_backend_pid(),
           clock_timestamp() + $4::float8 * interval '1 microsecond'
      FROM counter
    ON CONFLICT (key) DO UPDATE
        SET lock_id = EXCLUDED.lock_id,
            owner = EXCLUDED.owner,
            token = EXCLUDED.token,
            pid = EXCLUDED.pid,
            expires_at = EXCLUDED.expires_at
    RETURNING token
)
SELECT (SELECT got FROM locked) AS got,
       t.token,
       CASE WHEN t.token IS NOT NULL
            THEN set_config('idle_session_timeout', $5, false) END AS armed
  FROM (SELECT (SELECT token FROM holder) AS token) t
