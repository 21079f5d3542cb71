-- $1 key, $2 the phase's owner, $3 the phase's token, $4 reader.
-- Removes one reader from its live read phase; the last one out ends the phase and wakes
-- waiters (fencelock_lease_read_release, migration 6). Returns whether the reader was live.
SELECT {schema}.fencelock_lease_read_release($1, $2, $3, $4) AS released
