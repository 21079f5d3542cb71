-- Runs on the holding connection. $1 key, $2 the holder's owner, $3 its token, $4 the new
-- owner, $5 ttl in microseconds, $6 idle_session_timeout in ms.
-- Passes the lock from its holder to a new owner of the same process (DESIGN 4.0.2): the
-- session keeps the advisory lock (it is never unlocked, so it is never free), and its holder
-- record becomes the new owner's, with the key's next token and the new ttl, the session's
-- idle_session_timeout re-armed for it. The process files the session under the new lease.
-- Rows are locked in the order a grant locks them, the counter row first
-- (fencelock_issue_token, migration 18, without its lease check: this session holds the
-- lock), then the holder row (the UPDATE). `held` is a plain read of this session's record
-- of the holder with no live queued place (a pass never goes ahead of a fair request: the
-- holder then releases, which wakes that waiter); the UPDATE checks the record again on the
-- row it locks, so a record that changed in between is left as it is, and the token drawn
-- for it is a gap in the key's sequence (tokens still strictly increase).
-- Returns the new token; NULL with nothing changed but such a gap (the caller then releases
-- as usual), also when the live epoch cannot issue one.
-- Every table written is UNLOGGED: the commit waits for no WAL flush.
WITH held AS (
    SELECT h.key FROM {schema}.fencelock_advisory_holders h
     WHERE h.key = $1 AND h.owner = $2 AND h.token = $3 AND h.pid = pg_backend_pid()
       AND NOT EXISTS (
         SELECT 1 FROM {schema}.fencelock_advisory_places p
          WHERE p.key = $1 AND NOT p.gone AND p.lapses_at > clock_timestamp()
     )
), counter AS (
    SELECT {schema}.fencelock_issue_token($1, false) AS last_token FROM held
), passed AS (
    UPDATE {schema}.fencelock_advisory_holders h
       SET owner = $4,
           token = counter.last_token,
           expires_at = clock_timestamp() + $5::float8 * interval '1 microsecond'
      FROM counter
     WHERE h.key = $1 AND h.owner = $2 AND h.token = $3 AND h.pid = pg_backend_pid()
       AND counter.last_token IS NOT NULL
    RETURNING h.token
)
SELECT t.token,
       CASE WHEN t.token IS NOT NULL
            THEN set_config('idle_session_timeout', $6, false) END AS armed
  FROM (SELECT (SELECT token FROM passed) AS token) t
