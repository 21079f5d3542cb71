-- $1 resource, $2 token, $3 owner, $4 strict rule, $5 is a write, $6 value.
SELECT admitted, cur_token, cur_owner, cur_value
  FROM {schema}.fencelock_storage_apply($1, $2, $3, $4, $5, $6)
