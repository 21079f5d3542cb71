-- $1 key, $2 owner, $3 ttl in microseconds, $4 lock_timeout in ms.
-- Bumps the key's counter only when no live lease exists, then writes the lease. The final
-- ON CONFLICT ... WHERE re-checks expiry against the latest committed row, so two racing
-- acquirers can never both be granted; the loser of such a race may leave a gap in the
-- key's token sequence (tokens still strictly increase).
-- A free lock with a live queued waiter (fencelock_lease_places, migration 14) is kept for the
-- first of them: this try, which does not queue, sees it as held.
-- `free` is a plain read first: while the lock is held, a try neither locks the counter row
-- nor writes anything, so many waiters retrying a held lock do not queue on that row lock.
-- Every table written here is UNLOGGED: the commit waits for no WAL flush (DESIGN 5.3).
-- The next token, under the counter row's lock, by fencelock_next_token (migration 8; the
-- inserted row is the live epoch's first token, so EXCLUDED.last_token >> 32 is the live
-- epoch), refused while the key's counter is used up (fencelock_token_exhausted).
-- Returns the token when granted; otherwise `live` (NULL: no live epoch, the volatile state
-- was lost) and `exhausted` (the key's counter is used up in the live epoch) say whether the
-- caller must start a new epoch (fencelock_new_epoch) and try again.
-- `serves` is the schema's lock mechanism (fencelock_bind_mechanism, migration 9, recording
-- 'lease' when none is): a key is granted only when it is 'lease', and `bound` returns it, so
-- a schema bound to advisory locks is refused by the grant itself, whatever the client knew.
-- `bounded` sets lock_timeout for this statement's transaction only, before any row lock is
-- waited for: a grant behind a transaction holding the key's rows gives up (SQLSTATE 55P03,
-- "held") instead of waiting on the server after the client gave up. One statement, so it
-- also holds behind a transaction-mode pooler.
WITH bounded AS (
    SELECT set_config('lock_timeout', $4, true)
), serves AS (
    SELECT {schema}.fencelock_bind_mechanism('lease') AS bound
), live AS (
    SELECT e.epoch FROM {schema}.fencelock_epoch_live e, bounded WHERE e.one
), free AS (
    SELECT live.epoch FROM live, serves
     WHERE serves.bound = 'lease'
       AND NOT EXISTS (
         SELECT 1 FROM {schema}.fencelock_leases l
          WHERE l.key = $1 AND l.expires_at > clock_timestamp()
     )
       AND NOT EXISTS (
         SELECT 1 FROM {schema}.fencelock_lease_places p
          WHERE p.key = $1 AND p.lapses_at > clock_timestamp() AND NOT p.gone
     )
), counter AS (
    INSERT INTO {schema}.fencelock_counters AS c (key, last_token)
    SELECT $1, {schema}.fencelock_next_token(NULL, free.epoch) FROM free
    ON CONFLICT (key) DO UPDATE
        SET last_token = {schema}.fencelock_next_token(c.last_token, EXCLUDED.last_token >> 32)
        WHERE NOT EXISTS (
            SELECT 1 FROM {schema}.fencelock_leases l
             WHERE l.key = $1 AND l.expires_at > clock_timestamp()
        )
          AND NOT {schema}.fencelock_token_exhausted(c.last_token, EXCLUDED.last_token >> 32)
    RETURNING last_token
), granted AS (
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
)
SELECT g.token,
       (SELECT epoch FROM live) AS live,
       CASE WHEN g.token IS NULL THEN EXISTS (
           SELECT 1 FROM {schema}.fencelock_counters c, live
            WHERE c.key = $1 AND {schema}.fencelock_token_exhausted(c.last_token, live.epoch)
       ) ELSE false END AS exhausted,
       (SELECT bound FROM serves) AS bound
  FROM (SELECT (SELECT token FROM granted) AS token) g
