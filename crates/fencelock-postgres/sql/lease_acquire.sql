-- $1 key, $2 owner, $3 ttl in microseconds, $4 lock_timeout in ms.
-- Bumps the key's counter only when no live lease exists, then writes the lease. The final
-- ON CONFLICT ... WHERE re-checks expiry against the latest committed row, so two racing
-- acquirers can never both be granted; the loser of such a race may leave a gap in the
-- key's token sequence (tokens still strictly increase).
-- `free` is a plain read first: while the lock is held, a try neither locks the counter row
-- nor writes anything, so many waiters retrying a held lock do not queue on that row lock
-- and do not each pay a WAL flush for it.
-- `bounded` sets lock_timeout for this statement's transaction only, before any row lock is
-- waited for: a grant behind a transaction holding the key's rows gives up (SQLSTATE 55P03,
-- "held") instead of waiting on the server after the client gave up. One statement, so it
-- also holds behind a transaction-mode pooler.
WITH bounded AS (
    SELECT set_config('lock_timeout', $4, true)
), free AS (
    SELECT 1
      FROM bounded
     WHERE NOT EXISTS (
         SELECT 1 FROM {schema}.fencelock_leases l
          WHERE l.key = $1 AND l.expires_at > clock_timestamp()
     )
), counter AS (
    INSERT INTO {schema}.fencelock_counters AS c (key, last_token)
    SELECT $1, 1 FROM free
    ON CONFLICT (key) DO UPDATE
        SET last_token = c.last_token + 1
        WHERE NOT EXISTS (
            SELECT 1 FROM {schema}.fencelock_leases l
             WHERE l.key = $1 AND l.expires_at > clock_timestamp()
        )
    RETURNING last_token
)
INSERT INTO {schema}.fencelock_leases AS l (key, owner, token, expires_at)
SELECT $1, $2, counter.last_token,
       clock_timestamp() + $3::float8 * interval '1 microsecond'
  FROM counter
ON CONFLICT (key) DO UPDATE
    SET owner = EXCLUDED.owner,
        token = EXCLUDED.token,
        expires_at = EXCLUDED.expires_at
    WHERE l.expires_at <= clock_timestamp()
RETURNING token
