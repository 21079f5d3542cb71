-- $1 key, $2 the phase's owner, $3 the phase's token, $4 reader, $5 ttl in microseconds.
-- Renews one reader of a live read phase; never re-creates a reader or a phase that is gone
-- (fencelock_lease_read_extend, migration 6). `superseded`: another holder has the key.
SELECT r.extended, r.superseded
  FROM {schema}.fencelock_lease_read_extend($1, $2, $3, $4, $5) r
