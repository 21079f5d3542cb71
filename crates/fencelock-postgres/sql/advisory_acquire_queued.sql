-- Runs on the connection that will hold the lease.
-- $1 lock id, $2 key, $3 waiter (the owner of its grant), $4 ttl in microseconds,
-- $5 idle_session_timeout in ms, $6 the place ttl in microseconds.
-- A waiter's first queued try. A key with no place row at all (no waiter, not even one that
-- left) is granted by advisory_grant.sql's plain grant, in this statement's CTEs: no place
-- can be passed by, and no left waiter's try can be in flight (its row is kept `gone`), so
-- the function's checks would find nothing. Otherwise, or when that grant found the lock
-- taken, the function decides (fencelock_advisory_acquire_queued, migration 16): it tries
-- the lock only when this waiter heads the key's live queue (or none waits), else keeps the
-- waiter's place and returns the recorded holder's time left (`held_us`). The function runs
-- only when the plain grant did not take the lock (so the session never takes it twice: a
-- session advisory lock is re-entrant) and the schema's lock mechanism is 'advisory'
-- (`OFFSET 0` keeps that filter above the function scan, a one-time filter checked before
-- the scan).
WITH queue_clear AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM {schema}.fencelock_advisory_places p WHERE p.key = $2
    ) AS clear
),
{advisory_grant}
SELECT plain.got OR COALESCE(q.got, false) AS got,
       COALESCE(plain.token, q.token) AS token,
       CASE WHEN plain.got THEN plain.live ELSE q.live END AS live,
       CASE WHEN plain.got THEN plain.exhausted ELSE COALESCE(q.exhausted, false) END
           AS exhausted,
       plain.bound,
       q.held_us
  FROM plain
  LEFT JOIN LATERAL (
      SELECT f.got, f.token, f.live, f.exhausted, f.held_us
        FROM {schema}.fencelock_advisory_acquire_queued($1, $2, $3, $4, $5, $6) f
       WHERE plain.bound = 'advisory' AND NOT plain.got
      OFFSET 0
  ) q ON true
