-- $1 key, $2 owner, $3 token. Deletes only this owner's row; the delete trigger notifies
-- waiters. Returns whether the lease was still live.
DELETE FROM fencelock_leases
 WHERE key = $1 AND owner = $2 AND token = $3
RETURNING expires_at > clock_timestamp() AS live
