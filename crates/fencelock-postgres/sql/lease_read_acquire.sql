-- $1 key, $2 reader, $3 ttl in microseconds, $4 lock_timeout in ms, $5 the owner drawn for a
-- new read phase (unused when the reader joins a live phase).
-- A reader's grant (fencelock_lease_read_acquire, migration 6): joins the key's live read
-- phase or starts one; returns the phase's token and owner, or NULL with the live epoch and
-- `exhausted` as lease_acquire.sql does. One statement, so it holds behind a transaction
-- pooler: the function's statements run in this statement's one transaction.
SELECT r.token, r.owner, r.live, r.exhausted
  FROM {schema}.fencelock_lease_read_acquire($1, $2, $3, $4, $5) r
