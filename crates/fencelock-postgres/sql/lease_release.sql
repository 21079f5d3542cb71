-- $1 key, $2 owner, $3 token, $4 the hand-off ttl in microseconds.
-- Frees only this owner's row (fencelock_lease_free, migration 14): handed in the same
-- transaction to the key's first live queued waiter, notified by name, or deleted when none
-- waits (the delete trigger notifies the key's waiters). Returns whether the lease was still
-- live, NULL when it was not held.
-- The commit does not wait for its WAL flush: every table it writes is UNLOGGED (a crash
-- empties them, this release with them), and synchronous_commit is off for this transaction
-- only in case one is ever logged again; the durable epoch is never touched.
SELECT {schema}.fencelock_lease_free($1, $2, $3, $4) AS live
