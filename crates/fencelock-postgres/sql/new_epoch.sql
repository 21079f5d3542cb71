-- $1 the live epoch the caller saw (NULL: none). Starts a new durable epoch when the grant
-- needs one (fencelock_start_epoch, migration 18: the live epoch is gone, or a key's counter
-- is used up in it) unless another caller already did; commits synchronously.
SELECT {schema}.fencelock_start_epoch($1)
