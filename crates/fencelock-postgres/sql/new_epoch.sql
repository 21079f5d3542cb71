-- $1 the live epoch the caller saw (NULL: none). Starts a new durable epoch unless another
-- caller already did (see fencelock_new_epoch); commits synchronously.
SELECT {schema}.fencelock_new_epoch($1)
