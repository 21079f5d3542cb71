-- $1 resource, $2 token, $3 owner, $4 strict rule. Raises SQLSTATE FL001 when refused.
SELECT {schema}.fencelock_admit($1, $2, $3, $4)
