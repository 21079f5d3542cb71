-- $1 resource, $2 token. The healing step: lowers the resource's fence to ($2, no holder's
-- owner); returns the token it replaced, NULL when the resource has no fence record.
SELECT {schema}.fencelock_lower_fence($1, $2) AS was
