-- $1 key, $2 waiter (the owner of its grant), $3 ttl in microseconds, $4 lock_timeout in ms,
-- $5 the place ttl in microseconds.
-- A queued try of a waiter that has tried before, and so most likely holds a place or was
-- handed the lock (lease_acquire_queued.sql's grant of a free, unqueued key would find
-- nothing to do): the function alone (fencelock_lease_acquire_queued, migration 14). It
-- takes up a lock handed to this waiter, or grants a free lock when this waiter heads the
-- key's live queue (or none waits), or keeps the waiter's place. `token`, `live`,
-- `exhausted` as in lease_acquire.sql; `held_us` the holder's time left when refused. The function runs only when the schema's lock
-- mechanism is 'lease' (as lease_read_acquire.sql, `OFFSET 0` keeps the filter above the
-- function scan). One statement, so it holds behind a transaction-mode pooler.
SELECT r.token, r.live, COALESCE(r.exhausted, false) AS exhausted, s.bound, r.held_us
  FROM (SELECT {schema}.fencelock_bind_mechanism('lease') AS bound) s
  LEFT JOIN LATERAL (
      SELECT f.token, f.live, f.exhausted, f.held_us
        FROM {schema}.fencelock_lease_acquire_queued($1, $2, $3, $4, $5) f
       WHERE s.bound = 'lease'
      OFFSET 0
  ) r ON true
