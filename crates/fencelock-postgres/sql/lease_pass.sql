-- $1 key, $2 the holder's owner, $3 its token, $4 the new owner, $5 ttl in microseconds,
-- $6 lock_timeout in ms.
-- Passes the lock from its holder to a new owner of the same process in one statement
-- (DESIGN 4.0.2): the holder's row becomes the new owner's, with the key's next token and
-- the new ttl, so the lock is never free in between and nothing is notified. The token comes
-- from fencelock_issue_token (migration 18, which runs as the schema's owner) without its
-- lease check, since the live lease is the holder's own, which the UPDATE checks.
-- Rows are locked in the order every grant and release locks them, the key's counter row
-- first (fencelock_issue_token), then its lease row (the UPDATE): a pass and a concurrent
-- try never wait for each other in a circle. `held` is a plain read of the holder's live row
-- with no live queued place (a pass never goes ahead of a fair request: the holder then
-- releases, which hands the lock to that waiter); the UPDATE checks the holder's owner,
-- token and expiry again on the row it locks, so a row that changed in between is left as
-- it is, and the token drawn for it is a gap in the key's sequence (tokens still strictly
-- increase, as after a lost race in lease_grant.sql).
-- Returns the new token; NULL with nothing changed but such a gap (the caller then releases
-- as usual), also when the live epoch cannot issue one (the caller's next grant starts an
-- epoch).
-- Every table written is UNLOGGED: the commit waits for no WAL flush.
WITH bounded AS (
    SELECT set_config('lock_timeout', $6, true)
), held AS (
    SELECT l.key FROM {schema}.fencelock_leases l, bounded
     WHERE l.key = $1 AND l.owner = $2 AND l.token = $3
       AND l.expires_at > clock_timestamp()
       AND NOT EXISTS (
         SELECT 1 FROM {schema}.fencelock_lease_places p
          WHERE p.key = $1 AND p.lapses_at > clock_timestamp() AND NOT p.gone
     )
), counter AS (
    SELECT {schema}.fencelock_issue_token($1, false) AS last_token FROM held
), passed AS (
    UPDATE {schema}.fencelock_leases l
       SET owner = $4,
           token = counter.last_token,
           expires_at = clock_timestamp() + $5::float8 * interval '1 microsecond'
      FROM counter
     WHERE l.key = $1 AND l.owner = $2 AND l.token = $3
       AND l.expires_at > clock_timestamp()
       AND counter.last_token IS NOT NULL
    RETURNING l.token
)
SELECT (SELECT token FROM passed) AS token
