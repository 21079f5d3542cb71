-- $1 key, $2 owner, $3 token, $4 the hand-off ttl in microseconds.
-- Frees only this owner's row (fencelock_lease_release, migration 16): handed in the same
-- transaction to the key's first live queued waiter, notified by name, or deleted when none
-- waits (the delete trigger notifies the key's waiters). Returns whether the lease was still
-- live, NULL when it was not held, and the grant notification of a hand-off (NULL when none),
-- which this process tells a waiter of its own at once.
-- The commit does not wait for its WAL flush: every table it writes is UNLOGGED (a crash
-- empties them, this release with them), and synchronous_commit is off for this transaction
-- only in case one is ever logged again; the durable epoch is never touched.
SELECT r.live, r.handed FROM {schema}.fencelock_lease_release($1, $2, $3, $4) r
