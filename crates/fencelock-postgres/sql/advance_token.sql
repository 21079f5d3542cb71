-- $1 key, $2 floor. Raises the counter so that the next grant is above the floor; never
-- lowers it. A floor beyond the live epoch makes a new durable epoch first.
SELECT {schema}.fencelock_advance_token($1, $2)
