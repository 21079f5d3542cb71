-- Runs on the connection that will hold the lease.
-- $1 lock id, $2 key, $3 waiter (the owner of its grant), $4 ttl in microseconds,
-- $5 idle_session_timeout in ms, $6 the place ttl in microseconds, $7 the longest wait in ms.
-- The head of the key's queue waits for the lock inside the server, then tries as a queued
-- try does (fencelock_advisory_await, migration 20; DESIGN 5.3, "The head waits in the
-- server"): the grant, or the refusal with the place refreshed, is this statement's answer.
SELECT q.got, q.token, q.live, q.exhausted, q.bound, q.held_us, q.head
  FROM {schema}.fencelock_advisory_await($1, $2, $3, $4, $5, $6, $7) q
