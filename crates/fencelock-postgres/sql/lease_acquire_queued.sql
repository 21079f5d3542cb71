-- $1 key, $2 waiter (the owner of its grant), $3 ttl in microseconds, $4 lock_timeout in ms,
-- $5 the place ttl in microseconds.
-- A queued try. A key with no live lease and no place row at all (no waiter, not even one
-- that left) is granted by lease_acquire.sql's plain grant, in this statement's CTEs: no
-- place can be passed by, no lock was handed to anyone (a hand-off leaves a live lease), and
-- no left waiter's try can be in flight (its row is kept `gone`), so the function's checks
-- would find nothing. Otherwise, or when that grant lost a race or found the counter used
-- up, the function decides (fencelock_lease_acquire_queued, migration 14): takes up a lock
-- handed to this waiter, or grants a free lock when this waiter heads the key's live queue
-- (or none waits), or keeps the waiter's place. `token`, `live`, `exhausted` as in
-- lease_acquire.sql; `held_us` the holder's time left when refused. The function runs only
-- when the plain grant did not grant and the schema's lock mechanism is 'lease' (`OFFSET 0`
-- keeps that filter above the function scan, a one-time filter checked before the scan).
-- One statement, so it holds behind a transaction-mode pooler.
WITH queue_clear AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM {schema}.fencelock_lease_places p WHERE p.key = $1
    ) AS clear
),
{lease_grant}, plain AS (
    SELECT (SELECT token FROM granted) AS token, (SELECT epoch FROM live) AS live
)
SELECT COALESCE(plain.token, r.token) AS token,
       CASE WHEN plain.token IS NOT NULL THEN plain.live ELSE r.live END AS live,
       COALESCE(r.exhausted, false) AS exhausted,
       s.bound,
       r.held_us
  FROM serves s CROSS JOIN plain
  LEFT JOIN LATERAL (
      SELECT f.token, f.live, f.exhausted, f.held_us
        FROM {schema}.fencelock_lease_acquire_queued($1, $2, $3, $4, $5) f
       WHERE s.bound = 'lease' AND plain.token IS NULL
      OFFSET 0
  ) r ON true
