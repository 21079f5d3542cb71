-- $1 key, $2 owner, $3 ttl in microseconds, $4 lock_timeout in ms.
-- Bumps the key's counter only when no live lease exists, then writes the lease, by the CTEs
-- of lease_grant.sql (which says how racing acquirers are kept apart).
-- Every table written here is UNLOGGED: the commit waits for no WAL flush (DESIGN 5.3).
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
-- A free lock with a live queued waiter (fencelock_lease_places, migration 14) is kept for
-- the first of them: this try, which does not queue, sees it as held (`queue_clear`).
WITH queue_clear AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM {schema}.fencelock_lease_places p
         WHERE p.key = $1 AND p.lapses_at > clock_timestamp() AND NOT p.gone
    ) AS clear
),
{lease_grant}
SELECT g.token,
       (SELECT epoch FROM live) AS live,
       CASE WHEN g.token IS NULL THEN EXISTS (
           SELECT 1 FROM {schema}.fencelock_counters c, live
            WHERE c.key = $1 AND {schema}.fencelock_token_exhausted(c.last_token, live.epoch)
       ) ELSE false END AS exhausted,
       (SELECT bound FROM serves) AS bound
  FROM (SELECT (SELECT token FROM granted) AS token) g
