-- Runs on the connection that will hold the lease.
-- $1 lock id, $2 key, $3 waiter (the owner of its grant), $4 ttl in microseconds,
-- $5 idle_session_timeout in ms, $6 the place ttl in microseconds.
-- A queued try of a waiter that tried before (its refreshes, and its try when woken as the
-- head), which most likely holds a place: the function alone
-- (fencelock_advisory_acquire_queued, migration 16), without the plain grant's CTEs that
-- advisory_acquire_queued.sql runs first. Either statement gives the function's answer.
SELECT q.got, q.token, q.live, q.exhausted, q.bound, q.held_us
  FROM {schema}.fencelock_advisory_acquire_queued($1, $2, $3, $4, $5, $6) q
