-- $1 key, $2 owner, $3 token. Deletes only this owner's row; the delete trigger notifies
-- waiters. Returns whether the lease was still live.
-- The commit does not wait for its WAL flush: the lease table is UNLOGGED (a crash empties
-- it, this release with it), and synchronous_commit is off for this transaction only in case
-- the table is ever logged again; tokens live in fencelock_counters, which release never
-- touches.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
DELETE FROM {schema}.fencelock_leases
 WHERE key = $1 AND owner = $2 AND token = $3
   AND EXISTS (SELECT 1 FROM async_commit)
RETURNING expires_at > clock_timestamp() AS live
