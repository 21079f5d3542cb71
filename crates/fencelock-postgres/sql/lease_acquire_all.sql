-- $1 keys (text[], sorted, distinct), $2 owner, $3 ttl in microseconds, $4 the longest all the
-- row-lock waits together may take, in ms. Every key or none, in one transaction: see
-- fencelock_lease_acquire_all (migration 13). One statement, so it also holds behind a
-- transaction-mode pooler.
-- A set never overtakes a queue: while any key has a live queued waiter
-- (fencelock_lease_places, migration 14) the set is refused without calling the function,
-- with the live epoch and the schema's mechanism it would have returned. `OFFSET 0` keeps the
-- filter above the function scan, as in lease_read_acquire.sql.
SELECT s.tokens,
       CASE WHEN q.queued THEN (SELECT e.epoch FROM {schema}.fencelock_epoch_live e WHERE e.one)
            ELSE s.live END AS live,
       COALESCE(s.exhausted, false) AS exhausted,
       CASE WHEN q.queued THEN {schema}.fencelock_bind_mechanism('lease') ELSE s.bound END
           AS bound
  FROM (SELECT EXISTS (
           SELECT 1 FROM {schema}.fencelock_lease_places p
            WHERE p.key = ANY ($1) AND p.lapses_at > clock_timestamp() AND NOT p.gone
       ) AS queued) q
  LEFT JOIN LATERAL (
      SELECT f.tokens, f.live, f.exhausted, f.bound
        FROM {schema}.fencelock_lease_acquire_all($1, $2, $3, $4) f
       WHERE NOT q.queued
      OFFSET 0
  ) s ON true
