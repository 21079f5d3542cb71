-- The grant CTEs of lease_acquire.sql and lease_acquire_queued.sql, written into each where
-- it names them, after that statement's CTE `queue_clear (clear boolean)`, which says
-- whether the key's queue lets this try take a free lock.
-- $1 key, $2 owner, $3 ttl in microseconds, $4 lock_timeout in ms.
-- `free` is a plain read first: while the lock is held, a try neither locks the counter row
-- nor writes anything, so many waiters retrying a held lock do not queue on that row lock.
-- The next token comes from fencelock_issue_token (migration 18, which runs as the schema's
-- owner: the application role cannot write the counters), under the counter row's lock, by
-- fencelock_next_token, refused while the key's counter is used up or a lease is live. Its
-- ON CONFLICT ... WHERE re-checks expiry against the latest committed row, so two racing
-- acquirers can never both be granted; the loser of such a race may leave a gap in the
-- key's token sequence (tokens still strictly increase).
-- `bounded` sets lock_timeout for this statement's transaction only, before any row lock is
-- waited for.
bounded AS (
    SELECT set_config('lock_timeout', $4, true)
), serves AS (
    SELECT {schema}.fencelock_bind_mechanism('lease') AS bound
), live AS (
    SELECT e.epoch FROM {schema}.fencelock_epoch_live e, bounded WHERE e.one
), free AS (
    SELECT live.epoch FROM live, serves, queue_clear
     WHERE serves.bound = 'lease'
       AND queue_clear.clear
       AND NOT EXISTS (
         SELECT 1 FROM {schema}.fencelock_leases l
          WHERE l.key = $1 AND l.expires_at > clock_timestamp()
     )
), counter AS (
    SELECT {schema}.fencelock_issue_token($1, true) AS last_token FROM free
), granted AS (
    INSERT INTO {schema}.fencelock_leases AS l (key, owner, token, expires_at)
    SELECT $1, $2, counter.last_token,
           clock_timestamp() + $3::float8 * interval '1 microsecond'
      FROM counter
     WHERE counter.last_token IS NOT NULL
    ON CONFLICT (key) DO UPDATE
        SET owner = EXCLUDED.owner,
            token = EXCLUDED.token,
            expires_at = EXCLUDED.expires_at
        WHERE l.expires_at <= clock_timestamp()
    RETURNING token
)
