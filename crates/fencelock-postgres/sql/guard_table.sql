-- $1 table (text, resolved as the caller's SQL would), $2 token column, $3 owner column,
-- $4 strict rule. Installs (or replaces) the row guard triggers.
SELECT {schema}.fencelock_guard_table($1::regclass, $2, $3, $4)
