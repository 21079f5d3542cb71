-- $1 resource. The unfenced observer read.
SELECT value, token, owner FROM {schema}.fencelock_storage WHERE resource = $1
