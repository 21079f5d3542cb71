-- $1 token, $2 owner. Presents the fence for the rest of the transaction (DELETEs of guarded rows).
SELECT {schema}.fencelock_present($1, $2)
