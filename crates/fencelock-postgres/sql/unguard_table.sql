-- $1 table. Drops the row guard triggers, if any.
SELECT {schema}.fencelock_unguard_table($1::regclass)
