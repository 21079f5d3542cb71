-- $1 resource. The last fence fencelock_admit admitted for it, unfenced.
SELECT token, owner FROM {schema}.fencelock_fences WHERE resource = $1
