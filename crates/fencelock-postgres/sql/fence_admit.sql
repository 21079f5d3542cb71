-- $1 resource, $2 token, $3 owner, $4 strict rule, $5 the transaction's idle bound and $6 this
-- admit's wait for the fence record, as intervals ('1500 ms'). Raises SQLSTATE FL001 when
-- refused, FL008 for a token the schema's counter never granted, 55P03 past the wait.
SELECT {schema}.fencelock_admit_within($1, $2, $3, $4, $5::interval, $6::interval)
